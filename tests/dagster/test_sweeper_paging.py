"""The workflow sweeper is bounded: a run finishes at most its limit of pending workflows, the oldest
first, and the next run the rest (issue 39)."""

from controlplane.models import StreamRecord
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState


def test_a_sweep_takes_at_most_its_limit_the_oldest_first_and_the_next_the_rest(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    names = [f"s{n}" for n in range(3)]
    for since, name in enumerate(names, start=1):  # seals that crashed after their first step, in this order
        controller.streams.create_stream(unique, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
        record = controller.store.get_stream(unique, name)
        controller.streams._begin(record, StreamState.SEALING, {"name": "seal"})
        record.update(actions=[StreamRecord.pending_since.set(since)])

    first = controller.sweeper.sweep(limit=2)
    assert [o.subject for o in first] == [f"{unique}/s0", f"{unique}/s1"]
    assert controller.store.get_stream(unique, "s2").state == StreamState.SEALING.value
    second = controller.sweeper.sweep(limit=2)
    assert [o.subject for o in second] == [f"{unique}/s2"]
    assert all(controller.store.get_stream(unique, name).state == StreamState.SEALED.value for name in names)
    assert controller.sweeper.sweep(limit=2) == []
