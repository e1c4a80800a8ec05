"""Lambda Function URLs on loopback: HTTP requests in, the real handlers invoked, HTTP responses out.

Each function gets its own port (as each Function URL has its own host) and its own pool of worker
processes. A worker imports the handler module once and then serves one event at a time, as a Lambda
execution environment does; that matters because powertools' resolvers keep the current event in
module state. Requests are turned into payload-format-2.0 events exactly as the Function URL service
builds them (binary bodies base64-encoded, headers lower-cased, the 6 MB payload limit), and the
handler's result is turned back into a response the same way.

Identities: on AWS the Function URL service (AuthType AWS_IAM) puts the SigV4 signer's identity in
``requestContext.authorizer.iam``, and that is all the handlers read. A gateway started with
``simulate_identities`` turns an ``x-rillet-identity: <IAM ARN>`` header into that context, so tests
and demos can act as several principals; without it the context has no identity, as for a URL
without IAM auth. The header never reaches a handler either way.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rillet import api
from standalone import faults, logs
from standalone.stopping import raise_if_cancelled

MAX_PAYLOAD = 6 * 1024 * 1024
# A client that stops sending in the middle of a body is answered (400) after this long, instead of
# holding a server thread forever.
BODY_TIMEOUT_S = 30
ALLOWED_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE"  # the methods the three APIs' routes use
IDENTITY_HEADER = api.SIMULATED_IDENTITY
_TEXT_TYPES = ("application/json", "text/", "application/xml", "application/x-www-form-urlencoded")


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    handler: str  # "module.function", as in the Lambda configuration
    memory_mb: int = 512
    timeout_s: int = 30
    workers: int = 2


@dataclass
class InvocationMeter:
    """Counts invocations and billed duration per function (the benchmarks read it)."""

    invocations: dict[str, int] = field(default_factory=dict)
    gb_seconds: dict[str, float] = field(default_factory=dict)
    slowest: dict[str, float] = field(default_factory=dict)  # the longest invocation, seconds
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, spec: FunctionSpec, seconds: float) -> None:
        billed = max(0.001, round(seconds, 3))  # Lambda bills per millisecond
        with self._lock:
            self.invocations[spec.name] = self.invocations.get(spec.name, 0) + 1
            self.gb_seconds[spec.name] = self.gb_seconds.get(spec.name, 0.0) + billed * spec.memory_mb / 1024
            self.slowest[spec.name] = max(self.slowest.get(spec.name, 0.0), seconds)

    def reset(self) -> None:
        with self._lock:
            self.invocations.clear()
            self.gb_seconds.clear()
            self.slowest.clear()


@dataclass
class _Context:
    """The attributes of the Lambda context object that handlers and powertools read."""

    function_name: str
    memory_limit_in_mb: int
    timeout_s: int
    aws_request_id: str
    deadline: float
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.time()) * 1000))


_handler = None


def _load_handler(path: str, env: dict[str, str]) -> None:
    global _handler
    os.environ.update(env)
    faults.install_from_env()  # only when the stack injects faults into this function (history tests)
    logs.route_worker_output()  # when the stack keeps the terminal quiet (rillet standalone)
    module, function = path.rsplit(".", 1)
    _handler = getattr(importlib.import_module(module), function)


def _invoke(spec: FunctionSpec, event: dict) -> tuple[Any, float]:
    started = time.perf_counter()
    context = _Context(spec.name, spec.memory_mb, spec.timeout_s, str(uuid.uuid4()), time.time() + spec.timeout_s)
    result = _handler(event, context)
    return result, time.perf_counter() - started


def iam_context(arn: str) -> dict:
    """``requestContext.authorizer`` as a Function URL with AWS_IAM auth reports a signer (its IDs
    derived from the ARN, as this gateway has no real credentials to take them from)."""
    unique_id = "AIDA" + hashlib.sha256(arn.encode()).hexdigest()[:16].upper()
    parts = arn.split(":")
    account = parts[4] if len(parts) > 5 else ""
    return {"iam": {"accessKey": "ASIASIMULATED", "accountId": account, "callerId": unique_id,
                    "cognitoIdentity": None, "principalOrgId": None, "userArn": arn, "userId": unique_id}}


def build_event(method: str, target: str, headers: dict[str, str], body: bytes, host: str,
                source_ip: str, identity: str | None = None) -> dict:
    parts = urlsplit(target)
    query = parse_qsl(parts.query, keep_blank_values=True)
    params: dict[str, str] = {}
    for key, value in query:
        params[key] = f"{params[key]},{value}" if key in params else value
    text = _text_body(body, headers.get("content-type", ""))
    now = datetime.now(UTC)
    event = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": host.split(".")[0],
            "domainName": host,
            "domainPrefix": host.split(".")[0],
            "http": {"method": method, "path": parts.path, "protocol": "HTTP/1.1", "sourceIp": source_ip,
                     "userAgent": headers.get("user-agent", "")},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": bool(body) and text is None,
    }
    if identity:
        event["requestContext"]["authorizer"] = iam_context(identity)
        event["requestContext"]["accountId"] = event["requestContext"]["authorizer"]["iam"]["accountId"]
    if params:
        event["queryStringParameters"] = params
    if body:
        event["body"] = text if text is not None else base64.b64encode(body).decode()
    return event


def _text_body(body: bytes, content_type: str) -> str | None:
    """The body as the event's string for a text content type, or None to send it base64-encoded: binary
    types, and "text" that is not UTF-8 (the handler then refuses it as malformed, with a typed 400)."""
    if not any(content_type.startswith(t) for t in _TEXT_TYPES):
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def _payload_size(event: dict) -> int:
    """The size of the event as the Function URL service measures it (its JSON), without encoding the
    body twice: the body is ASCII (base64 or JSON text) and dominates; the rest is small."""
    body = event.pop("body", "")
    try:
        return len(json.dumps(event)) + len(body) + 16
    finally:
        if body:
            event["body"] = body


def decode_result(result: Any) -> tuple[int, dict[str, str], bytes]:
    """A handler's return value as (status, headers, body), per the Function URL response rules."""
    if not isinstance(result, dict) or "statusCode" not in result:
        return 200, {"content-type": "application/json"}, json.dumps(result).encode()
    headers = {k.lower(): str(v) for k, v in (result.get("headers") or {}).items()}
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers[name.lower()] = ",".join(str(v) for v in values)
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode()
    return int(result["statusCode"]), headers, raw


class FunctionUrl:
    """One function behind its own loopback port."""

    def __init__(self, spec: FunctionSpec, env: dict[str, str], meter: InvocationMeter,
                 host: str = "127.0.0.1", port: int = 0, simulate_identities: bool = False) -> None:
        self.spec = spec
        self.meter = meter
        self.simulate_identities = simulate_identities
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self.pool = ProcessPoolExecutor(spec.workers, mp_context=context, initializer=_load_handler,
                                        initargs=(spec.handler, env))
        self.server = _Server((host, port), self._request_handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"url-{spec.name}", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self, cancel: threading.Event | None = None) -> FunctionUrl:
        """Spawn and warm every worker, then take traffic (the first requests do not pay the imports).
        ``cancel`` set meanwhile abandons the wait (StartCancelled); ``stop`` ends the workers."""
        with _terminal_signals_blocked():  # each call spawns a worker: all of them are spawned here
            warming = {self.pool.submit(_warm, n) for n in range(self.spec.workers)}
        while warming:
            raise_if_cancelled(cancel)
            done, warming = wait(warming, timeout=0.1)
            for future in done:
                future.result()  # BrokenProcessPool if a worker could not import its handler
        self.thread.start()
        return self

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (benchmarks read their memory from /proc)."""
        return list(self.pool._processes or {})

    def stop(self) -> None:
        """Stop taking requests and end the workers at once, those still importing their handler
        included (a function keeps nothing): waiting for them delayed a stop by seconds."""
        if self.thread.is_alive():  # shutdown() waits for serve_forever, forever if it never ran
            self.server.shutdown()
        self.server.server_close()
        workers = list((self.pool._processes or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:  # as Python 3.14's ProcessPoolExecutor.terminate_workers()
            worker.terminate()
        for worker in workers:
            worker.join()

    def invoke(self, event: dict) -> Any:
        result, seconds = self.pool.submit(_invoke, self.spec, event).result(timeout=self.spec.timeout_s + 5)
        self.meter.add(self.spec, seconds)
        return result

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        function = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                body = self._read_body()
                if body is None:
                    return None
                headers: dict[str, str] = {}
                for name, value in self.headers.items():
                    key = name.lower()
                    headers[key] = f"{headers[key]},{value}" if key in headers else value
                identity = headers.pop(IDENTITY_HEADER, None)
                event = build_event(self.command, self.path, headers, body, self.headers.get("host", "localhost"),
                                    self.client_address[0], identity if function.simulate_identities else None)
                if _payload_size(event) > MAX_PAYLOAD:
                    return self._send(413, {"content-type": "application/json"}, json.dumps(
                        {"code": "TooLarge", "message": f"request payload exceeds {MAX_PAYLOAD} bytes"}).encode())
                try:
                    status, out_headers, out_body = decode_result(function.invoke(event))
                except (Exception, faults.InjectedCrash):  # noqa: BLE001 - crashed or timed out, as Lambda reports it
                    status, out_headers, out_body = 502, {"content-type": "application/json"}, json.dumps(
                        {"code": "InternalError", "message": "the function failed"}).encode()
                self._send(status, out_headers, out_body)

            def _read_body(self) -> bytes | None:
                """The body, exactly as many bytes as Content-Length says; otherwise None, with a typed
                error answered and the connection closed. A short body (the client stopped sending, or
                closed early) never reaches a function: it would be appended truncated. Chunked bodies
                are refused rather than decoded, as the SDK never sends them."""
                if "transfer-encoding" in self.headers:
                    return self._refuse(400, "InvalidArgument", "send the body with a Content-Length header "
                                                                "(Transfer-Encoding is not supported)")
                declared = self.headers.get("content-length")
                if declared is None:
                    return b""
                if not (declared.isascii() and declared.isdigit()):
                    return self._refuse(400, "InvalidArgument", f"Content-Length {declared[:40]!r} is not a byte count")
                length = int(declared)
                self.connection.settimeout(BODY_TIMEOUT_S)
                try:
                    if length > MAX_PAYLOAD:
                        _drain(self.rfile, length)  # the client reads the answer only once it has sent all
                        return self._refuse(413, "TooLarge", f"request payload exceeds {MAX_PAYLOAD} bytes")
                    body = self.rfile.read(length)
                except TimeoutError:
                    body = b""
                finally:
                    self.connection.settimeout(None)
                if len(body) != length:
                    return self._refuse(400, "InvalidArgument",
                                        f"the body ended before the {length} bytes its Content-Length announced")
                return body

            def _refuse(self, status: int, code: str, message: str) -> None:
                self.close_connection = True  # what is left of the body must not be read as a request
                self._send(status, {"content-type": "application/json"},
                           json.dumps({"code": code, "message": message}).encode())

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                """What the HTTP server answers by itself (a malformed request line or header, a method
                no function serves) in the API's JSON error shape rather than an HTML page; a method the
                APIs do not declare is 405, as a Function URL refuses it, never a 5xx."""
                if code == HTTPStatus.NOT_IMPLEMENTED:
                    self.close_connection = True  # its body, if any, was not read
                    self._send(405, {"content-type": "application/json", "allow": ALLOWED_METHODS}, json.dumps(
                        {"code": "MethodNotAllowed",
                         "message": f"method {self.command} is not allowed: use {ALLOWED_METHODS}"}).encode())
                    return
                error = "TooLarge" if code in (413, 414, 431) else "InvalidArgument"
                self._refuse(code, error, message or HTTPStatus(code).phrase)

            def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                if self.close_connection:
                    # Say so: a client that pools connections must not send its next request on this one.
                    self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve

        return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: tuple) -> None:
        """A client that went away mid-answer (Ctrl-C of ``rillet stream tail -f``) is nothing to report;
        anything else is one line on the terminal, not socketserver's traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        print(f"[gateway] ERROR: serving {client_address[0]}: {type(error).__name__}: {error}", file=sys.stderr)


def _drain(stream: Any, length: int) -> None:
    """Read and drop up to ``length`` bytes (less if the client closes), a chunk at a time."""
    while length > 0 and (chunk := stream.read(min(length, 1 << 20))):
        length -= len(chunk)


@contextmanager
def _terminal_signals_blocked() -> Iterator[None]:
    """Processes spawned inside start with the terminal's signals blocked (a child inherits the signal
    mask, and Python leaves it as it finds it): Ctrl-C reaches the whole foreground group, workers
    included, and is for the stack to handle (standalone/stopping.py). The stack ends its workers
    with SIGTERM. The standard library starts multiprocessing's resource tracker the same way."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _warm(_: int) -> bool:
    time.sleep(0.05)  # let each warm-up call land on a different worker
    return _handler is not None
