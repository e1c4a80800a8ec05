"""The CLI's exit codes where no controller is needed: bad input exits 2 before any request, and an
endpoint that answers but is not a Rillet controller is said to be so (exit 1), not read as "not found"."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rillet.cli import main

NOTHING_LISTENS = "http://127.0.0.1:1"  # bad input must be refused before the first request


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args", [
    ("stream", "create", "bad name!/s"), ("stream", "info", "no-slash"), ("scope", "create", "bad/name"),
    ("rg", "delete", "scope/bad name!"), ("kvt", "delete", "no-slash"),
])
def test_a_bad_name_exits_2_in_one_line(capsys, args):
    code, out, err = run(capsys, "--endpoint", NOTHING_LISTENS, *args)
    assert (code, out) == (2, "") and err.startswith("error: InvalidArgument: ") and err.count("\n") == 1


@pytest.mark.parametrize(("option", "value"), [("--retention-time", "0s"), ("--retention-size", "0")])
def test_a_retention_that_keeps_nothing_is_refused(capsys, option, value):
    for command in ("create", "update"):
        code, out, err = run(capsys, "--endpoint", NOTHING_LISTENS, "stream", command, "s/t", option, value)
        assert (code, out) == (2, "")
        assert err == f"error: InvalidArgument: {option} must be more than 0: it is what a stream keeps at least " \
                      "(to keep everything, give no retention policy)\n"


class _NotAController(BaseHTTPRequestHandler):
    """A web UI (a page for every GET, as Dagster's) that knows no POST or DELETE route (a JSON 400, or
    moto's 404 page)."""

    def do_GET(self):
        self._answer(200, b"<html>a web UI</html>", "text/html")

    def do_POST(self):
        self._answer(400, json.dumps({"errors": ["bad arguments"]}).encode(), "application/json")

    def do_DELETE(self):
        self._answer(404, b"<html>404 Not Found</html>", "text/html")

    def _answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def other_service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotAController)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("args", [("scope", "list"), ("scope", "create", "s"), ("stream", "delete", "s/t")])
def test_an_endpoint_that_is_not_a_controller_is_named(capsys, other_service, args):
    code, out, err = run(capsys, "--endpoint", other_service, *args)
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"error: NotARilletController: {other_service} is not a Rillet controller (it answered ")
    code, out, err = run(capsys, "--endpoint", other_service, "--json", *args)
    assert (code, out) == (1, "") and json.loads(err)["code"] == "NotARilletController"
