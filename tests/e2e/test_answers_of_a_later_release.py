"""An SDK keeps working against a later release of the server, whose answers carry fields it does not
know (as the AWS SDKs do): the README's tour, CLI and Python, runs against the session stack with an
unknown field added to every object of every JSON answer. Requests stay strict: the server still
refuses a field it does not know (tests/e2e/test_api_fuzz.py and the request models' tests)."""

from __future__ import annotations

from typing import Any

import pytest
import test_readme_tour

from rillet.models import StreamConfiguration
from rillet.transport import Transport

ADDED = "added_by_a_later_release"


def _with_unknown_fields(value: Any) -> Any:
    """``value`` with a field of any shape added to each of its objects (the answer models have no map
    fields, whose keys would be data rather than field names)."""
    if isinstance(value, list):
        return [_with_unknown_fields(item) for item in value]
    if isinstance(value, dict):
        return {**{k: _with_unknown_fields(v) for k, v in value.items()}, ADDED: {"any": ["shape"]}}
    return value


@pytest.fixture
def later_release(monkeypatch) -> list[Any]:
    """Every JSON answer the SDK reads, edited as a later release would send it; the answers seen."""
    seen: list[Any] = []
    original = Transport.json

    def answer(self: Transport, *args: Any, **kwargs: Any) -> Any:
        edited = _with_unknown_fields(original(self, *args, **kwargs))
        seen.append(edited)
        return edited

    monkeypatch.setattr(Transport, "json", answer)
    return seen


def test_the_readme_tour_reads_answers_with_fields_it_does_not_know(later_release, url, capsys):
    test_readme_tour.test_the_readme_tour_works(url, capsys)
    assert sum(isinstance(a, dict) and ADDED in a for a in later_release) >= 10


def test_a_stream_description_with_unknown_fields_keeps_what_the_sdk_knows(later_release, manager, unique):
    manager.create_scope(unique)
    config = StreamConfiguration(sublog_shards=4)
    manager.create_stream(unique, "s", config)
    info = manager.controller.stream_info(unique, "s")
    assert info.configuration == config
    assert ADDED in later_release[-1] and ADDED in later_release[-1]["configuration"]
