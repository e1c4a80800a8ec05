"""The sweeper: finishes workflows that a crash or a timeout left half done.

It reads the sparse ``workflows`` index (only records with a workflow in flight are in it), skips
those younger than a grace period (they probably still have a live caller) and runs the same
``finish_*`` step that the original request would have run next. Every step is idempotent, so a
sweeper racing with a slow original caller costs a retried write at worst.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from controlplane.kvt_records import KeyValueTableRecord
from controlplane.kvtables import KeyValueTables
from controlplane.models import ScopeRecord, StreamRecord, TxnRecord
from controlplane.streams import StreamTasks, now_ms
from controlplane.transactions import TransactionTasks
from dataplane.fanout import error_outcome, fan_out
from rillet.errors import NotFound, RilletError, ScopeNotEmpty

log = logging.getLogger(__name__)

# A run finishes at most SWEEP_RUN_LIMIT workflows, the oldest first (the next run the rest), the
# workflows of SWEEP_WORKERS partitions at once (docs/limits.md).
SWEEP_RUN_LIMIT = 1_000
SWEEP_WORKERS = 8


@dataclass(frozen=True)
class SweepOutcome:
    subject: str  # "scope" or "scope/stream"
    workflow: str
    outcome: str  # "completed", "reverted", the error code that stopped it, or "error: <code>" of another error


class Sweeper:
    def __init__(self, tasks: StreamTasks, grace_ms: int = 30_000) -> None:
        self.tasks = tasks
        self.grace_ms = grace_ms

    @property
    def transactions(self) -> TransactionTasks:
        return self.tasks.transactions

    def sweep(self, limit: int = SWEEP_RUN_LIMIT, workers: int = SWEEP_WORKERS) -> list[SweepOutcome]:
        """Finish up to ``limit`` of the workflows pending past the grace period, the oldest first. Those
        of one partition (a stream and its transactions, a table) are finished in order, as one caller
        would; partitions in parallel, ``workers`` at once. Scope deletes come last, in order: one finds
        its scope empty only once the deletes of the streams and tables in it are finished."""
        partitions: dict[str, list[StreamRecord | TxnRecord | KeyValueTableRecord]] = {}
        scopes: list[ScopeRecord] = []
        for item in self.tasks.store.pending_workflows(now_ms() - self.grace_ms)[:limit]:
            if isinstance(item, ScopeRecord):
                scopes.append(item)
            else:
                partitions.setdefault(item.pk, []).append(item)
        finished, _ = fan_out(lambda items: [self._finish(item) for item in items], list(partitions.values()), workers)
        return [outcome for outcomes in finished for outcome in outcomes] + [self._finish(item) for item in scopes]

    def _finish(self, item: ScopeRecord | StreamRecord | TxnRecord | KeyValueTableRecord) -> SweepOutcome:
        store = self.tasks.store
        if isinstance(item, TxnRecord):
            return self._finish_txn(item)
        if isinstance(item, KeyValueTableRecord):
            return self._finish_table_delete(item)
        if isinstance(item, ScopeRecord):
            try:
                self.tasks.finish_delete_scope(store.get_scope(item.scope))
                return SweepOutcome(item.scope, "delete-scope", "completed")
            except ScopeNotEmpty:
                return SweepOutcome(item.scope, "delete-scope", "reverted")
            except NotFound:
                return SweepOutcome(item.scope, "delete-scope", "completed")
            except RilletError as e:
                return SweepOutcome(item.scope, "delete-scope", e.code)
            except Exception as e:  # throttled, say: this workflow's outcome, not the run's
                log.exception("sweeper failed on delete-scope of %s", item.scope)
                return SweepOutcome(item.scope, "delete-scope", error_outcome(e))
        subject = f"{item.scope}/{item.stream}"
        name = (item.workflow or {}).get("name", "unknown")
        try:
            record = store.get_stream(item.scope, item.stream)
            if not record.workflow:
                return SweepOutcome(subject, name, "completed")
            owner = self.transactions if record.workflow["name"] == "commit" else self.tasks
            getattr(owner, f"finish_{record.workflow['name']}_stream")(record)
            return SweepOutcome(subject, name, "completed")
        except NotFound:
            return SweepOutcome(subject, name, "completed")
        except RilletError as e:
            log.warning("sweeper could not finish %s of %s: %s", name, subject, e)
            return SweepOutcome(subject, name, e.code)
        except Exception as e:  # throttled, say: this workflow's outcome, not the run's
            log.exception("sweeper failed on %s of %s", name, subject)
            return SweepOutcome(subject, name, error_outcome(e))

    def _finish_table_delete(self, item: KeyValueTableRecord) -> SweepOutcome:
        """Deleting is the only key-value table workflow with steps (see controlplane.kvtables)."""
        subject = f"{item.scope}/{item.table}"
        try:
            KeyValueTables(self.tasks.store).resume_delete(item.scope, item.table, item.incarnation)
            return SweepOutcome(subject, "delete-kvt", "completed")
        except RilletError as e:
            log.warning("sweeper could not finish delete-kvt of %s: %s", subject, e)
            return SweepOutcome(subject, "delete-kvt", e.code)
        except Exception as e:  # throttled, say: this workflow's outcome, not the run's
            log.exception("sweeper failed on delete-kvt of %s", subject)
            return SweepOutcome(subject, "delete-kvt", error_outcome(e))

    def _finish_txn(self, item: TxnRecord) -> SweepOutcome:
        subject = f"{item.scope}/{item.stream}"
        workflow = f"{item.state.lower()}-txn {item.txn_id}"
        try:
            if item.state == "ABORTING":
                self.transactions.abort(item.scope, item.stream, item.txn_id)
            else:
                self.transactions.mark_committing(item)
                self.transactions.drive_commits(item.scope, item.stream)
            return SweepOutcome(subject, workflow, "completed")
        except NotFound:
            return SweepOutcome(subject, workflow, "completed")
        except RilletError as e:
            log.warning("sweeper could not finish %s of %s: %s", workflow, subject, e)
            return SweepOutcome(subject, workflow, e.code)
        except Exception as e:  # throttled, say: this workflow's outcome, not the run's
            log.exception("sweeper failed on %s of %s", workflow, subject)
            return SweepOutcome(subject, workflow, error_outcome(e))
