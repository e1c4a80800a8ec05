"""Crash injection: make the process "die" right before its k-th mutating AWS request.

boto3 and PynamoDB both send every request through ``botocore.client.BaseClient._make_api_call``, so
patching it sees every DynamoDB and S3 call of the control and data planes. Reads pass untouched;
before the k-th *mutating* call a :class:`SimulatedCrash` is raised instead of sending it. It derives
from ``BaseException`` so no ``except Exception`` in the code under test can swallow it: like a real
crash, nothing after that point runs, and everything before it has happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import botocore.client

MUTATING = frozenset({
    "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem",
    "PutObject", "DeleteObject", "DeleteObjects",
})  # CreateBucket and CreateTable are set-up, not workflow steps


class SimulatedCrash(BaseException):
    """The process died before sending ``operation`` (the k-th mutating request)."""

    def __init__(self, k: int, operation: str) -> None:
        super().__init__(f"simulated crash before mutating request #{k} ({operation})")
        self.k = k
        self.operation = operation


@dataclass
class CrashInjector:
    crash_at: int | None = None  # crash before this mutating request (1-based); None = disarmed
    mutations: list[str] = field(default_factory=list)  # mutating requests sent since arming
    crashed: SimulatedCrash | None = None
    _original: object = None

    def install(self) -> CrashInjector:
        assert self._original is None, "already installed"
        original = botocore.client.BaseClient._make_api_call
        injector = self

        def _make_api_call(client, operation_name, api_params):
            if injector.crash_at is not None and operation_name in MUTATING:
                if len(injector.mutations) + 1 == injector.crash_at:
                    injector.crashed = SimulatedCrash(injector.crash_at, operation_name)
                    injector.crash_at = None  # a dead process sends nothing more; recovery runs disarmed
                    raise injector.crashed
                injector.mutations.append(operation_name)
            return original(client, operation_name, api_params)

        self._original = original
        botocore.client.BaseClient._make_api_call = _make_api_call
        return self

    def uninstall(self) -> None:
        if self._original is not None:
            botocore.client.BaseClient._make_api_call = self._original
            self._original = None

    def arm(self, k: int) -> None:
        assert k >= 1
        self.crash_at = k
        self.mutations = []
        self.crashed = None

    def disarm(self) -> None:
        self.crash_at = None
