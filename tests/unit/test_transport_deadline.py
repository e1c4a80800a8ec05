"""A caller's deadline bounds the transport's own retries (the writer's ``retry_timeout_s``).

Without it, one append could outlast the writer's timeout by six attempts of up to 30 s each, and a
future the writer should have failed as OutcomeUnknown stayed open. A real HTTP server here answers
slowly or with 503 every time.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rillet.errors import ServiceUnavailable
from rillet.transport import Transport


class _Server:
    def __init__(self, delay_s: float, status: int) -> None:
        self.attempts = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server.attempts += 1
                self.rfile.read(int(self.headers.get("content-length", 0)))
                time.sleep(delay_s)
                body = b'{"code": "ServiceUnavailable", "message": "busy"}'
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up on this attempt

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def busy():
    server = _Server(delay_s=0.0, status=503)
    yield server
    server.close()


@pytest.fixture
def slow():
    server = _Server(delay_s=3.0, status=503)
    yield server
    server.close()


def test_retries_stop_at_the_deadline(busy):
    transport = Transport(busy.url, sign=False, max_attempts=50)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable):
        transport.request("POST", "/x", body=b"1", deadline=started + 1.0)
    assert time.monotonic() - started < 2.5
    assert 1 <= busy.attempts < 50


def test_an_attempt_waits_no_longer_than_the_deadline_allows(slow):
    transport = Transport(slow.url, sign=False, timeout_s=30.0)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable):  # the read timed out: unknown, never "failed"
        transport.request("POST", "/x", body=b"1", deadline=started + 0.5)
    assert time.monotonic() - started < 2.5  # an attempt gets at least a second, not 30
    assert slow.attempts == 1


def test_without_a_deadline_every_attempt_is_made(busy):
    transport = Transport(busy.url, sign=False, max_attempts=3)
    with pytest.raises(ServiceUnavailable):
        transport.request("POST", "/x", body=b"1")
    assert busy.attempts == 3
