"""Fault injection into the AWS calls of the Lambda handlers, for the fault-injecting history tests.

Off unless ``RILLET_FAULTS`` holds a :class:`FaultConfig` (JSON); the standalone stack sets it only in
the worker processes of the functions the config names, and the gateway calls :func:`install_from_env`
when a worker starts. Installed, every botocore client created in the process (boto3's S3 client and
PynamoDB's DynamoDB clients alike go through ``botocore.session.Session.create_client``) gets a
``before-send`` handler, so faults hit each HTTP attempt where a real one would, *under* botocore's own
retries; and its retries are cut to ``max_attempts`` so that enough faults get through to the handler.

Per attempt, one draw picks at most one fault:

* ``throttle``: a ProvisionedThroughputExceededException (DynamoDB) or SlowDown (S3), not applied;
* ``server_error``: an InternalServerError (DynamoDB) or InternalError (S3), not applied;
* ``reset``: the connection is closed before the request is sent, not applied;
* ``answer_lost``: the request is sent and applied, then the caller sees a read timeout;
* ``crash`` (mutating requests only): the invocation dies before the request is sent, or after it was
  applied (in turn, after first: across the worker processes that record into one directory, else in
  each process). :class:`InjectedCrash` is a ``BaseException`` so that no ``except Exception``
  in the handler catches it; the gateway answers 502 as a Function URL does for a crashed function.

Every injected fault is appended to ``<record_dir>/<function>-<pid>.faults`` (one kind per line), so
a benchmark can count them across worker processes.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import botocore.session
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
from botocore.httpsession import URLLib3Session

FAULTS_ENV = "RILLET_FAULTS"
KINDS = ("throttle", "server_error", "reset", "answer_lost", "crash_before", "crash_after")
MUTATING = frozenset({
    "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem",
    "PutObject", "DeleteObject", "DeleteObjects", "CopyObject",
    "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
})


class InjectedCrash(BaseException):
    """The invocation died in the middle of a request (before sending it, or after it was applied)."""


@dataclass(frozen=True)
class FaultRates:
    """Probability of each fault per AWS request attempt (``crash``: per mutating attempt)."""

    throttle: float = 0.0
    server_error: float = 0.0
    reset: float = 0.0
    answer_lost: float = 0.0
    crash: float = 0.0

    def __post_init__(self) -> None:
        if min(asdict(self).values()) < 0 or sum(asdict(self).values()) > 1:
            raise ValueError(f"fault rates must be >= 0 and sum to at most 1: {self}")


@dataclass(frozen=True)
class FaultConfig:
    rates: FaultRates = field(default_factory=FaultRates)
    seed: int = 0
    functions: tuple[str, ...] = ("append", "read", "tails", "controller")
    max_attempts: int = 2  # botocore attempts per call (its defaults, 3 to 5, would hide most faults)
    record_dir: str | None = None
    function: str = ""  # set by the stack for each function's workers

    def for_function(self, name: str) -> FaultConfig:
        return replace(self, function=name)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, value: str) -> FaultConfig:
        raw = json.loads(value)
        return cls(**{**raw, "rates": FaultRates(**raw["rates"]), "functions": tuple(raw["functions"])})


def read_records(record_dir: str) -> Counter:
    """The faults injected so far by every worker that records into ``record_dir``, per kind."""
    counts: Counter = Counter()
    for path in Path(record_dir).glob("*.faults"):
        counts.update(path.read_text().split())
    return counts


class FaultInjector:
    """Draws and injects the faults of one process (its botocore clients share it)."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        # The seed fixes each worker's sequence of draws; which request gets which draw still depends
        # on how the handlers' threads and the worker processes interleave.
        self.random = random.Random(f"{config.seed}/{config.function}/{os.getpid()}")
        self.lock = threading.Lock()
        self.crashes = 0  # this process's, for the alternation when nothing is recorded
        self.http = URLLib3Session(timeout=30)
        self.record = (Path(config.record_dir) / f"{config.function}-{os.getpid()}.faults"
                       if config.record_dir else None)

    def attach(self, client) -> None:
        """Inject into every request attempt of ``client`` (DynamoDB and S3 clients; others untouched)."""
        if client.meta.service_model.service_name in ("dynamodb", "s3"):
            client.meta.events.register("before-send", self.before_send)

    def draw(self, operation: str) -> str | None:
        r = self.config.rates
        with self.lock:
            u = self.random.random()
        for kind, rate in (("throttle", r.throttle), ("server_error", r.server_error), ("reset", r.reset),
                           ("answer_lost", r.answer_lost)):
            if u < rate:
                return kind
            u -= rate
        if operation in MUTATING and u < r.crash:
            with self.lock:
                return self._next_crash()
        return None

    def _next_crash(self) -> str:
        """Crashes alternate after/before, so that any two show both kinds. A history's few crashes
        often land in different worker processes (a full run once had 3, each the first of its process,
        all "after"), so where the workers record, the turn is taken from every worker's record."""
        if self.record is not None:
            done = sum(n for kind, n in read_records(self.config.record_dir).items() if kind.startswith("crash"))
        else:
            done, self.crashes = self.crashes, self.crashes + 1
        return "crash_after" if done % 2 == 0 else "crash_before"

    def before_send(self, request, event_name: str, **_) -> AWSResponse | None:
        _, service, operation = event_name.split(".", 2)
        kind = self.draw(operation)
        if kind is None:
            return None
        self._note(kind)
        if kind == "throttle":
            return _error_response(request.url, service, throttle=True)
        if kind == "server_error":
            return _error_response(request.url, service, throttle=False)
        if kind == "reset":
            raise ConnectionClosedError(endpoint_url=request.url)
        if kind == "crash_before":
            raise InjectedCrash(f"crashed before {operation}")
        self.http.send(request)  # applied: the answer goes nowhere
        if kind == "answer_lost":
            raise ReadTimeoutError(endpoint_url=request.url)
        raise InjectedCrash(f"crashed after {operation} was applied")

    def _note(self, kind: str) -> None:
        if self.record is not None:
            with self.lock, open(self.record, "a") as f:
                f.write(kind + "\n")


class _Body:
    """The raw stream of a made-up response (AWSResponse reads ``raw.stream()``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_):
        yield self.data


def _error_response(url: str, service: str, throttle: bool) -> AWSResponse:
    if service == "s3":
        status, code = (503, "SlowDown") if throttle else (500, "InternalError")
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>injected fault</Message><RequestId>fault</RequestId></Error>").encode()
        return AWSResponse(url, status, {"content-type": "application/xml"}, _Body(body))
    status, code = (400, "ProvisionedThroughputExceededException") if throttle else (500, "InternalServerError")
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected fault"}).encode()
    return AWSResponse(url, status, {"content-type": "application/x-amz-json-1.0"}, _Body(body))


_installed: FaultInjector | None = None


def install(config: FaultConfig) -> None:
    """Inject faults into every botocore client this process creates from now on."""
    global _installed
    if _installed is not None:
        raise RuntimeError("fault injection is already installed in this process")
    _installed = injector = FaultInjector(config)
    original = botocore.session.Session.create_client
    signature = inspect.signature(original)
    retries = Config(retries={"mode": "standard", "total_max_attempts": config.max_attempts})

    def create_client(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments.get("config")
        bound.arguments["config"] = given.merge(retries) if given is not None else retries
        client = original(*bound.args, **bound.kwargs)
        injector.attach(client)
        return client

    botocore.session.Session.create_client = create_client


def install_from_env() -> None:
    """Install the faults ``RILLET_FAULTS`` describes, if it is set (the stack sets it per function)."""
    value = os.environ.get(FAULTS_ENV)
    if value:
        install(FaultConfig.from_env(value))
