"""The stack a benchmark runs against: moto's DynamoDB and S3 in-process, with Rillet's tables and bucket."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from dataplane import models
from dataplane.deployment import Deployment
from standalone.moto_server import MotoServer, RequestMeter
from standalone.resources import create_resources


@contextmanager
def moto_stack(meter: RequestMeter | None = None, bind: bool = False) -> Iterator[tuple[MotoServer, Deployment]]:
    """A started moto server with the deployment's resources created, stopped on exit: (server,
    deployment). ``meter`` counts its requests; ``bind`` points the data plane's models at it, for
    benches that call the segment store in-process."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    server = MotoServer(meter=meter).start()
    try:
        deployment = Deployment(endpoint_url=server.url)
        create_resources(deployment)
        if bind:
            models.bind(deployment)
        yield server, deployment
    finally:
        server.stop()
