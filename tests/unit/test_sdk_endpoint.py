"""Every SDK entry point finds the deployment as the CLI does: the URL passed, else RILLET_ENDPOINT, else the
standalone stack's controller. A tour pasted with another stack configured writes into that one, not into
whatever answers on 127.0.0.1:9090."""

from __future__ import annotations

import pytest

import rillet
from rillet.cli.parser import build_parser
from rillet.endpoint import DEFAULT_ENDPOINT

CONFIGURED = "http://127.0.0.1:19090"


def _controller_urls() -> dict[str, str]:
    return {
        "StreamManager": rillet.StreamManager().controller.transport.endpoint,
        "EventStreamClientFactory": rillet.EventStreamClientFactory("demo").connection.controller.transport.endpoint,
        "ReaderGroupManager": rillet.ReaderGroupManager("demo").connection.controller.transport.endpoint,
        "KeyValueTableManager": rillet.KeyValueTableManager().controller.transport.endpoint,
        "cli": build_parser(["scope", "list"]).parse_args(["scope", "list"]).endpoint,
    }


def test_every_client_takes_rillet_endpoint_as_the_cli_does(monkeypatch):
    monkeypatch.setenv("RILLET_ENDPOINT", CONFIGURED)
    assert _controller_urls() == dict.fromkeys(_controller_urls(), CONFIGURED)


@pytest.mark.parametrize("value", [None, ""])
def test_without_rillet_endpoint_every_client_takes_the_standalone_stack(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("RILLET_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("RILLET_ENDPOINT", value)
    assert set(_controller_urls().values()) == {DEFAULT_ENDPOINT}


def test_a_url_passed_wins_over_rillet_endpoint(monkeypatch):
    monkeypatch.setenv("RILLET_ENDPOINT", CONFIGURED)
    assert rillet.StreamManager("http://127.0.0.1:29090/").controller.transport.endpoint == "http://127.0.0.1:29090"
