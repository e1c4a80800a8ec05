"""Tails API: the tail check alone (lambdas/tail_check.py), in a function of its own.

A reader waiting at the tail sends one tail check every couple of seconds, all day; each is one small
DynamoDB read that needs a fraction of the read function's memory. Served here, at 128 MB, an idle
reader costs cents a day (docs/benchmarks.md, read path). The module imports only what a tail check
needs: no S3 client, presigner or append path.

The function runs without Lambda's START/END/REPORT lines (infra/terraform/lambda.tf: they would cost
about as much as the check), so it reports its own memory: a warning line, at most once a minute per
instance, while the instance's peak memory is at or above 80 % of the function's (the tails-memory
alarm in monitoring.tf counts these lines).
"""

from __future__ import annotations

import os
import resource
import time

from aws_lambda_powertools.utilities.typing import LambdaContext

from dataplane import models
from dataplane.deployment import Deployment
from lambdas import tail_check
from lambdas.http import build_resolver, powertools

logger, metrics, tracer = powertools("tails")
app = build_resolver(logger)
models.bind(Deployment.from_env())
app.include_router(tail_check.router)

MEMORY_HIGH = 0.8  # of the function's memory: where an instance starts warning
MEMORY_WARNING = "tails instance memory high"  # the line the tails-memory metric filter counts
_memory_warned_at = float("-inf")  # time.monotonic() of this instance's last warning


def warn_if_memory_high(memory_mb: int) -> None:
    """Log MEMORY_WARNING (with the peak and the size) if this instance's peak memory is high and it has
    not warned in the last minute."""
    global _memory_warned_at
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes
    now = time.monotonic()
    if memory_mb and peak_mb >= MEMORY_HIGH * memory_mb and now - _memory_warned_at >= 60:
        _memory_warned_at = now
        logger.warning(MEMORY_WARNING, extra={"max_memory_used_mb": round(peak_mb), "memory_size_mb": memory_mb})


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    answer = app.resolve(event, context)
    warn_if_memory_high(int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "0")))
    return answer
