"""AWS's request latency, added on this machine: moto answers on loopback in about a millisecond, where
DynamoDB takes 5 to 10 ms and S3 tens, so a protocol's serial steps only show their cost with it added.
Benchmarks and tests use it to measure the data path as AWS would run it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from botocore.httpsession import URLLib3Session


@contextmanager
def aws_latency(ms: float) -> Iterator[None]:
    """Every AWS request of this process (every botocore client, through its HTTP session) waits ``ms``
    before it is sent. A constant, not a distribution."""
    send = URLLib3Session.send

    def delayed(session: URLLib3Session, request: object) -> object:
        time.sleep(ms / 1000)
        return send(session, request)

    URLLib3Session.send = delayed if ms else send
    try:
        yield
    finally:
        URLLib3Session.send = send
