"""Tails API: the tail check alone (lambdas/tail_check.py), in a function of its own.

A reader waiting at the tail sends one tail check every couple of seconds, all day; each is one small
DynamoDB read that needs a fraction of the read function's memory. Served here, at 128 MB, an idle
reader costs cents a day (docs/benchmarks.md, read path). The module imports only what a tail check
needs: no S3 client, presigner or append path.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext

from dataplane import models
from dataplane.deployment import Deployment
from lambdas import tail_check
from lambdas.http import build_resolver, powertools

logger, metrics, tracer = powertools("tails")
app = build_resolver(logger)
models.bind(Deployment.from_env())
app.include_router(tail_check.router)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
