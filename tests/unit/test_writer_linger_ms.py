"""``EventWriterConfig(linger_ms=...)`` of the previous release: accepted for one release, warned, as
``max_latency_ms``."""

from __future__ import annotations

import dataclasses

import pytest

from rillet import EventWriterConfig


def test_linger_ms_is_max_latency_ms_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"linger_ms=\.\.\.\) is deprecated .* use max_latency_ms") as caught:
        config = EventWriterConfig(linger_ms=40, max_concurrency=4)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert config == EventWriterConfig(max_latency_ms=40, max_concurrency=4)
    assert dataclasses.replace(config, max_concurrency=2).max_latency_ms == 40


def test_linger_ms_with_max_latency_ms_is_refused():
    with pytest.raises(TypeError, match="not also the deprecated linger_ms"):
        EventWriterConfig(linger_ms=40, max_latency_ms=100)


def test_without_linger_ms_nothing_is_warned(recwarn):
    assert EventWriterConfig().max_latency_ms == 250 and EventWriterConfig.lowest_latency().max_latency_ms == 0
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
