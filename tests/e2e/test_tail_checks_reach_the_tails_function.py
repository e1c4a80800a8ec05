"""An SDK reader idle at the tail sends its tail checks to the tails function (issue 27): the standalone
stack serves it on a port of its own, metered at its 128 MB, and counts its invocations; the read
function gets none of them, and the first event still reaches the reader."""

from __future__ import annotations

import rillet
from rillet.framing import frame


def test_an_idle_reader_checks_tails_at_the_tails_function_only(stack, manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(2)))
    factory = rillet.EventStreamClientFactory(unique, url)
    reader = factory.create_stream_reader("s", rillet.BytesSerializer(), backoff=rillet.TailBackoff(first_s=0.05, max_s=0.4))
    segments = reader.connection.segments
    assert reader.connection.controller.endpoints.tails_url == stack.functions["tails"].url
    assert stack.functions["tails"].spec.memory_mb == 128
    sent = {"read": [], "tails": []}
    for name, paths in sent.items():
        transport = getattr(segments, f"{name}_transport")
        original = transport.request
        transport.request = lambda method, path, paths=paths, original=original, **kw: (
            paths.append(path) or original(method, path, **kw))

    assert reader.read_next_event(timeout_ms=0) is None  # each segment located once: at the tail
    sent["read"].clear()
    sent["tails"].clear()
    tails_before = stack.invocations.invocations.get("tails", 0)
    assert reader.read_next_event(timeout_ms=2000) is None
    assert sent["read"] == [], sent  # no read request while idle
    assert len(sent["tails"]) >= 3 and all(path.endswith("/tails") for path in sent["tails"]), sent
    # every check was an invocation of the tails function (others may run beside this test: at least)
    assert stack.invocations.invocations.get("tails", 0) - tails_before >= len(sent["tails"])

    first = reader.connection.controller.current_segments(unique, "s")[0].segment_id
    segments.append(unique, "s", first, "w", 0, 1, frame(b"news"))
    event = reader.read_next_event(timeout_ms=5000)
    assert event is not None and event.event == b"news" and event.pointer.segment_id == first
