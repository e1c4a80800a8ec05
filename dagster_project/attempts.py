"""Work that a run did not finish is asked again; work that keeps failing is set aside and reported.

Dagster's sensor daemon starts no run for a run key that already has one, whatever that run's outcome.
So a sensor's run key is the digest of its work (``work_key``: the same work seen on two ticks starts
one run while it is in flight, and none again once a run finished it), followed, once a run of that
work has ended without finishing it, by that run's id: a run that failed, was canceled, or tagged
itself ``rillet/unfinished`` (an item raised, a scale decision was not applied). The next tick that
sees the work asks for it under that new key, which no earlier run can hold (a count of recent
failures could: it falls again as they age out of a window, and a key met again is skipped for ever).

Attempts live in the runs' tags, which Dagster keeps anyway: a tick with work reads at most
``RECENT_RUNS`` unfinished runs of the job created in the last ``WINDOW_S`` (two queries of the run
storage; none on a tick without work), and each request reads the newest unfinished run of its work
(two more, of one run each). A piece of work, or an item, that ``ATTEMPTS`` of them left unfinished is
set aside until its failures age out of the window, then asked again, and every tick that sets work
aside writes a ``work_set_aside`` line with the ``WorkSetAside`` metric (observability.py), which an
alarm watches (infra/terraform/monitoring.tf). A run counts only once it has ended: one that tagged
itself unfinished but is still running does not yet make the work asked again.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime

from aws_lambda_powertools.metrics import MetricUnit
from dagster import DagsterRunStatus, OpExecutionContext, RunRequest, RunsFilter, SensorEvaluationContext

from dagster_project.observability import emit

WORK_TAG = "rillet/work"  # the work's digest, the run key without its attempt
UNFINISHED_TAG = "rillet/unfinished"  # "true" on a run that ended with work not done
FAILED_ITEMS_TAG = "rillet/failed-items"  # a JSON list of the items it did not finish
FAILED_ITEMS_LISTED = 50  # bounds that tag (a run with more counts only these against their items)
WINDOW_S = 3_600  # failures older than this no longer count: set-aside work is tried again after it
ATTEMPTS = 3  # unfinished runs within the window after which a piece of work or an item is set aside
RECENT_RUNS = 100  # unfinished runs a tick reads, per query
_ENDED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
_FAILED = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
REPORTED = 20  # items a work_set_aside line names (it counts them all)


class Attempts:
    """How often the recent runs of one job left each piece of work and each item unfinished."""

    def __init__(self, job_name: str, unfinished_runs: Iterable, instance=None) -> None:
        self.job_name = job_name
        self._instance = instance  # for each request's newest unfinished run (None: a test without one)
        runs = {run.run_id: run for run in unfinished_runs}.values()  # a run can be both failed and tagged
        self.by_work = Counter(run.tags[WORK_TAG] for run in runs if WORK_TAG in run.tags)
        self.by_item = Counter(item for run in runs for item in json.loads(run.tags.get(FAILED_ITEMS_TAG, "[]")))

    @classmethod
    def of(cls, context: SensorEvaluationContext, job_name: str) -> Attempts:
        """The job's unfinished runs of the window (none known when a test evaluates the sensor without
        an instance)."""
        if context.instance_ref is None:
            return cls(job_name, [])
        since = datetime.fromtimestamp(time.time() - WINDOW_S, tz=UTC)
        failed = context.instance.get_runs(RunsFilter(job_name=job_name, statuses=_FAILED, created_after=since),
                                           limit=RECENT_RUNS)
        tagged = context.instance.get_runs(RunsFilter(job_name=job_name, tags={UNFINISHED_TAG: "true"},
                                                      statuses=_ENDED, created_after=since), limit=RECENT_RUNS)
        return cls(job_name, [*failed, *tagged], context.instance)

    def set_aside(self, items: list[str]) -> tuple[list[str], list[str]]:
        """The items to ask for, and those that ``ATTEMPTS`` runs of the window left unfinished."""
        failing = [item for item in items if self.by_item[item] >= ATTEMPTS]
        return [item for item in items if self.by_item[item] < ATTEMPTS], failing

    def request(self, work: str, **request: object) -> RunRequest | None:
        """The run request for this work (its name, e.g. a ``work_key``; None when its runs failed
        ``ATTEMPTS`` times in the window): its run key changes with each run that ended without
        finishing it, and never comes back to one a run had."""
        if self.by_work[work] >= ATTEMPTS:
            return None
        tags = {**request.pop("tags", {}), WORK_TAG: work}
        after = self._last_unfinished(work)
        return RunRequest(run_key=work if after is None else f"{work}-after-{after}", tags=tags, **request)

    def _last_unfinished(self, work: str) -> str | None:
        """The id of the newest ended run of ``work`` that did not finish it, whenever it ran (None: none)."""
        if self._instance is None:
            return None
        records = [*self._instance.get_run_records(
            RunsFilter(job_name=self.job_name, tags={WORK_TAG: work}, statuses=_FAILED), limit=1),
            *self._instance.get_run_records(
                RunsFilter(job_name=self.job_name, tags={WORK_TAG: work, UNFINISHED_TAG: "true"}, statuses=_ENDED),
                limit=1)]
        if not records:
            return None
        return max(records, key=lambda record: record.create_timestamp).dagster_run.run_id

    def report(self, context: SensorEvaluationContext, items: list[str]) -> None:
        """Tell the operator about work set aside: the tick's log and one metric line."""
        if not items:
            return
        context.log.error("%s: %d item(s) set aside after %d unfinished runs within %d s: %s", self.job_name,
                          len(items), ATTEMPTS, WINDOW_S, ", ".join(items[:REPORTED]))
        emit("dagster", {"WorkSetAside": (len(items), MetricUnit.Count)}, {"job": self.job_name}, level="error",
             event="work_set_aside", items=", ".join(items[:REPORTED]), attempts=ATTEMPTS, window_s=WINDOW_S)


def mark_unfinished(context: OpExecutionContext, failed: dict[str, str]) -> None:
    """Tag the run with the items it did not finish (item -> outcome), so the sensor asks for them again
    under a new run key, and list them in its log."""
    if not failed:
        return
    items = sorted(failed)
    context.log.warning("%d item(s) not finished, asked again by a later run: %s", len(items),
                        ", ".join(f"{item} ({failed[item]})" for item in items[:REPORTED]))
    context.instance.add_run_tags(context.run_id, {
        UNFINISHED_TAG: "true", FAILED_ITEMS_TAG: json.dumps(items[:FAILED_ITEMS_LISTED])})
