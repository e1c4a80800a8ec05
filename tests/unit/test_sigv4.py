"""SigV4 as AWS verifies it, and the transport's configuration errors and Retry-After backoff.

A local HTTP server stands in for a Function URL: it records each request as it arrived on the wire
and checks its signature the way AWS does, from the *decoded* path and query (RFC 3986: ``+`` is a
literal plus, ``%20`` a space), re-encoded canonically and signed with botocore's own SigV4 code.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from this_thread import patch_in_this_thread

import rillet.transport as transport_module
from rillet.errors import InvalidArgument, Throttled
from rillet.transport import Transport

ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
REGION = "eu-west-3"


class Recorder(BaseHTTPRequestHandler):
    """Records every request and answers from the server's script (default: 200 with an empty JSON body)."""

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.received.append((self.command, self.path, dict(self.headers.items()), body))
        status, headers = self.server.script.pop(0) if self.server.script else (200, {})
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        payload = b'{"code": "Throttled", "message": "slow down"}' if status >= 400 else b"{}"
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _handle

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    httpd.received, httpd.script = [], []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


def _decoded_query(raw: str) -> list[tuple[str, str]]:
    """The parameters as AWS reads a query string: split on & and =, percent-decoded, '+' kept."""
    return [(unquote(k), unquote(v)) for k, _, v in (p.partition("=") for p in raw.split("&") if p)]


def _aws_signature(method: str, target: str, headers: dict[str, str], body: bytes) -> str:
    """The signature AWS expects for a request received as ``target``: canonical form of what it means."""
    parts = urlsplit(target)
    # each segment decoded and encoded again (botocore's canonical_request adds AWS's second encoding)
    encoded_path = "/".join(quote(unquote(segment), safe="-_.~") for segment in parts.path.split("/"))
    signed = dict(p.split("=", 1) for p in headers["Authorization"].split(" ", 1)[1].split(", "))["SignedHeaders"]
    request = AWSRequest(method=method, url=f"http://{headers['Host']}{encoded_path}", data=body,
                         params=_decoded_query(parts.query),
                         headers={k: v for k, v in headers.items() if k.lower() in signed.split(";")})
    request.context["timestamp"] = headers["X-Amz-Date"]
    auth = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "lambda", REGION)
    return auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)


def _signature_sent(headers: dict[str, str]) -> str:
    return headers["Authorization"].rsplit("Signature=", 1)[1]


@pytest.mark.parametrize(("path", "params", "decoded_path"), [
    ("/v1/scopes", {"q": "two words"}, "/v1/scopes"),
    ("/v1/scopes", {"tag": "größe ünïcode ✓"}, "/v1/scopes"),
    ("/v1/scopes/s/streams", {"zeta": "1", "alpha": "a+b", "mid": "x/y?z=&w", "tilde": "~-_."}, "/v1/scopes/s/streams"),
    (f"/v1/scopes/{quote('a b', safe='')}/readers/{quote('r/1 ü', safe='')}", {"start": "s c"},
     "/v1/scopes/a b/readers/r/1 ü"),
])
def test_signed_requests_verify_as_aws_canonicalises_them(server, credentials, path, params, decoded_path):
    transport = Transport(f"http://127.0.0.1:{server.server_port}", sign=True, region=REGION)
    transport.request("POST", path, params=params, json_body={"k": "v"})
    method, target, headers, body = server.received[-1]
    parts = urlsplit(target)
    assert unquote(parts.path) == decoded_path
    assert sorted(_decoded_query(parts.query)) == sorted((k, str(v)) for k, v in params.items())
    assert _signature_sent(headers) == _aws_signature(method, target, headers, body)


def test_signing_without_a_region_is_a_clear_configuration_error(credentials, monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(InvalidArgument) as raised:
        Transport("https://rillet.example.com", sign=True)
    assert "region=" in raised.value.message and "AWS_REGION" in raised.value.message


def test_signing_takes_the_region_from_the_environment(credentials, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "ap-south-2")
    assert Transport("https://rillet.example.com", sign=True).region == "ap-south-2"


def test_a_function_url_names_its_region(credentials):
    assert Transport("https://abc123.lambda-url.sa-east-1.on.aws", sign=True).region == "sa-east-1"


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The transport's backoff sleeps, recorded instead of slept (this thread's only)."""
    slept: list[float] = []
    patch_in_this_thread(monkeypatch, transport_module.time, "sleep", slept.append)
    return slept


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_the_minimum_backoff(server, sleeps, status):
    server.script = [(status, {"Retry-After": "3"}), (200, {})]
    Transport(f"http://127.0.0.1:{server.server_port}").request("GET", "/v1/scopes")
    assert len(server.received) == 2
    assert sleeps and sleeps[0] >= 3


def test_retry_after_is_capped(server, sleeps):
    server.script = [(429, {"Retry-After": "86400"}), (200, {})]
    Transport(f"http://127.0.0.1:{server.server_port}").request("GET", "/v1/scopes")
    assert sleeps[0] == transport_module.MAX_RETRY_AFTER_S


def test_throttling_past_the_attempts_is_reported_as_throttled(server, sleeps):
    server.script = [(429, {"Retry-After": "1"})] * 3
    with pytest.raises(Throttled):
        Transport(f"http://127.0.0.1:{server.server_port}", max_attempts=3).request("GET", "/v1/scopes")
    assert len(sleeps) == 2 and min(sleeps) >= 1
