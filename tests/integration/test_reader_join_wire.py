"""The join request on the wire: its body is optional, its instance token a short plain string.

The real controller handler is called in-process, so the test sees the status and error body a client
gets: a join without a body, with ``{}`` or with ``null`` goes by name, as before tokens existed; the
same token joins again; another token gets 409 AlreadyExists; a malformed token is a 400.
"""

from __future__ import annotations

import json

import pytest
from lambda_events import handler_modules, invoke

from rillet.models import ReaderGroupConfig, StreamConfiguration, StreamRange

JSON = {"content-type": "application/json"}


@pytest.fixture
def join(deployment, monkeypatch, controller, unique):
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration())
    controller.reader_groups.create(unique, "g", ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")]))
    module = handler_modules(deployment, monkeypatch)["controller_api"]

    def post(reader: str, body: bytes) -> tuple[int, dict]:
        status, _, answer = invoke(module, "POST", f"/v1/scopes/{unique}/reader-groups/g/readers/{reader}", body,
                                   **JSON)
        return status, answer

    return post


@pytest.mark.parametrize("body", [b"", b"{}", b"null"])
def test_a_join_without_a_token_goes_by_name(join, body):
    assert join("r1", body)[0] == 200
    assert join("r1", body)[0] == 200
    assert join("r1", json.dumps({"instance": "a"}).encode())[0] == 200


def test_the_same_token_joins_again_and_another_is_already_exists(join):
    assert join("r1", b'{"instance": "a1"}')[0] == 200
    assert join("r1", b'{"instance": "a1"}')[0] == 200
    status, answer = join("r1", b'{"instance": "b2"}')
    assert (status, answer["code"]) == (409, "AlreadyExists")
    assert "r1" in answer["message"]


@pytest.mark.parametrize("token", ["", "a b", "x" * 65, 5, ["a"]])
def test_a_malformed_token_is_invalid_argument(join, token):
    status, answer = join("r1", json.dumps({"instance": token}).encode())
    assert (status, answer["code"]) == (400, "InvalidArgument")
