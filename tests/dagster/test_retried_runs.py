"""Work that a run did not finish is asked again: the deployed sensors evaluated by Dagster's own sensor
daemon code (``execute_sensor_iteration``, which skips a run key that already has a run, whatever its
outcome), their runs executed by the instance as they start, against isolated tables.

A fault is injected into one item's work on the first attempt only (each test checks it fired); the
work must be done by a later tick's run all the same.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from dagster import DagsterRunStatus
from dagster._core.instance_for_test import instance_for_test
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.sensor import execute_sensor_iteration

HERE = Path(__file__).parent


class Daemon:
    """The sensor daemon's iterations over one code location of tests/dagster/daemon_location.py, each a
    minute of Dagster's clock after the last, so no sensor's minimum interval holds a tick back."""

    def __init__(self, instance, workspace) -> None:
        self.instance, self.workspace = instance, workspace
        self.clock = time.time()

    def tick(self) -> None:
        self.clock += 61
        with freeze_time(self.clock):
            list(execute_sensor_iteration(self.workspace, logging.getLogger("test-sensor-daemon"),
                                          threadpool_executor=None, submit_threadpool_executor=None))

    def runs(self):
        return list(reversed(self.instance.get_runs()))  # the oldest first


@contextmanager
def daemon(isolated, monkeypatch, tmp_path, location: str):
    mine, _ = isolated
    for name, value in (("ENDPOINT_URL", mine.endpoint_url), ("METADATA_TABLE", mine.metadata_table),
                        ("SEGMENTS_TABLE", mine.segments_table), ("BUCKET", mine.bucket)):
        monkeypatch.setenv(f"RILLET_TEST_{name}", value)
    origin = LoadableTargetOrigin(executable_path=sys.executable, python_file=str(HERE / "daemon_location.py"),
                                  attribute=location, working_directory=str(HERE))
    with instance_for_test(temp_dir=str(tmp_path), synchronous_run_coordinator=True,
                           synchronous_run_launcher=True) as instance, \
            create_test_daemon_workspace_context(
                InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin)), instance) as workspace:
        yield Daemon(instance, workspace)


def throttled_once(monkeypatch, owner, method: str, victim) -> list:
    """Make ``owner.method`` raise DynamoDB's throttling error once for the call ``victim`` accepts;
    returns the list of calls that raised (the test checks the fault fired)."""
    from botocore.exceptions import ClientError

    original, fired = getattr(owner, method), []

    def faulty(self, *args, **kwargs):
        if victim(*args) and not fired:
            fired.append(args)
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "UpdateItem")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, faulty)
    return fired


def test_an_expired_transaction_whose_abort_was_throttled_is_aborted_by_a_later_run(
        isolated, unique, monkeypatch, tmp_path):
    from controlplane.models import TxnRecord, stream_pk, txn_sk
    from controlplane.transactions import TransactionTasks
    from rillet.models import ScalingPolicy, StreamConfiguration, TxnState

    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    txn = controller.transactions.begin(unique, "s", lease_ms=5_000)
    TxnRecord.get(stream_pk(unique, "s"), txn_sk(txn.txn_id), consistent_read=True).update(
        actions=[TxnRecord.lease_expiry_ms.set(1), TxnRecord.deadline_ms.set(1)])
    fired = throttled_once(monkeypatch, TransactionTasks, "abort_if_expired", lambda *args: args[2] == txn.txn_id)

    with daemon(isolated, monkeypatch, tmp_path, "txn_timeout") as d:
        d.tick()
        assert fired, "the fault was injected"
        assert controller.transactions.status(unique, "s", txn.txn_id).state == TxnState.OPEN
        d.tick()
        assert controller.transactions.status(unique, "s", txn.txn_id).state == TxnState.ABORTED
        first, second = d.runs()
        assert first.run_id != second.run_id and second.status == DagsterRunStatus.SUCCESS
        d.tick()  # nothing is due any more: no third run
        assert len(d.runs()) == 2


def test_a_transaction_whose_abort_always_fails_is_set_aside_and_reported_and_the_others_are_aborted(
        isolated, unique, monkeypatch, tmp_path, capsys):
    import json

    from controlplane.models import TxnRecord, stream_pk, txn_sk
    from controlplane.transactions import TransactionTasks
    from dagster_project import attempts as attempts_module
    from dagster_project.attempts import ATTEMPTS
    from rillet.models import ScalingPolicy, StreamConfiguration, TxnState

    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))

    def expired_txn() -> str:
        txn = controller.transactions.begin(unique, "s", lease_ms=5_000)
        TxnRecord.get(stream_pk(unique, "s"), txn_sk(txn.txn_id), consistent_read=True).update(
            actions=[TxnRecord.lease_expiry_ms.set(1), TxnRecord.deadline_ms.set(1)])
        return txn.txn_id

    poison = expired_txn()
    original, fired = TransactionTasks.abort_if_expired, []

    def always_throttled(self, scope, stream, txn_id):
        if txn_id == poison:
            fired.append(txn_id)
            raise TimeoutError("read timed out")
        return original(self, scope, stream, txn_id)

    monkeypatch.setattr(TransactionTasks, "abort_if_expired", always_throttled)
    with daemon(isolated, monkeypatch, tmp_path, "txn_timeout") as d:
        for _ in range(ATTEMPTS):
            d.tick()
        assert len(fired) == ATTEMPTS and [r.status for r in d.runs()] == [DagsterRunStatus.SUCCESS] * ATTEMPTS
        capsys.readouterr()
        other = expired_txn()
        d.tick()  # the poison is set aside: the run is for the other transaction only
        assert len(fired) == ATTEMPTS
        assert controller.transactions.status(unique, "s", other).state == TxnState.ABORTED
        assert controller.transactions.status(unique, "s", poison).state == TxnState.OPEN
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        (line,) = [line for line in lines if line.get("event") == "work_set_aside"]
        assert (line["WorkSetAside"], line["job"], line["items"]) == (1, "abort_expired_transactions_job",
                                                                      f"{unique}/s/{poison}")
        d.tick()  # only the poison is due: no run, reported again
        assert len(d.runs()) == ATTEMPTS + 1 and len(fired) == ATTEMPTS
        # Its failures age out of the window: it is asked again, under a key no run had (a key made from
        # the count of failures in the window came back to the first run's, and was skipped for ever).
        # (the runs carry Dagster's frozen clock, which the ticks move ahead of the wall clock the window
        # is measured on: a window ending an hour from now leaves them all out)
        monkeypatch.setattr(attempts_module, "WINDOW_S", -3_600)
        d.tick()
        assert len(fired) == ATTEMPTS + 1, "set-aside work was not asked again once its failures aged out"
        d.tick()
        assert len(fired) == ATTEMPTS + 2
        keys = [run.tags["dagster/run_key"] for run in d.runs()]
        assert len(set(keys)) == len(keys) == ATTEMPTS + 3, keys


def test_the_readers_of_a_group_whose_look_failed_are_taken_offline_by_a_later_run(
        isolated, unique, monkeypatch, tmp_path):
    from controlplane.reader_groups.groups import ReaderGroups
    from rillet.models import ReaderGroupConfig, ScalingPolicy, StreamConfiguration, StreamRange

    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    groups = controller.reader_groups
    groups.create(unique, "dead", ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")],
                                                    automatic_checkpoint_interval_ms=0, group_refresh_time_ms=100,
                                                    reader_lease_ms=1_000))
    for reader in ("r1", "r2"):
        groups.add_reader(unique, "dead", reader)
    time.sleep(1.05)  # both readers were killed without a goodbye
    fired = throttled_once(monkeypatch, ReaderGroups, "expire_readers", lambda scope, group: group == "dead")

    with daemon(isolated, monkeypatch, tmp_path, "reader_lease") as d:
        d.tick()
        assert fired, "the fault was injected"
        assert groups.info(unique, "dead").online_readers, "the first run did not finish the group"
        d.tick()
        assert groups.info(unique, "dead").online_readers == []
        assert [r.status for r in d.runs()] == [DagsterRunStatus.SUCCESS] * 2


def test_a_scale_decision_not_applied_is_applied_by_a_later_run(
        isolated, unique, monkeypatch, tmp_path, fast_botocore_sessions, default_scale_settings):
    from test_autoscale_sensor import _traffic

    from controlplane.streams import StreamTasks
    from rillet.errors import IllegalState
    from rillet.models import ScalingPolicy, StreamConfiguration

    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(10, 3, 1)))
    original, fired = StreamTasks.scale_stream, []

    def mid_truncation(self, scope, stream, *args, **kwargs):
        if stream == "s" and scope == unique and not fired:
            fired.append(stream)
            raise IllegalState("the stream is being truncated")
        return original(self, scope, stream, *args, **kwargs)

    monkeypatch.setattr(StreamTasks, "scale_stream", mid_truncation)
    _traffic(unique, 0, (100.0, 0.0, 0.0, 0.0))  # hot: due now
    with daemon(isolated, monkeypatch, tmp_path, "autoscale") as d:
        d.tick()
        assert fired, "the fault was injected"
        assert controller.store.get_stream(unique, "s").current_epoch == 0
        _traffic(unique, 0, (100.0, 0.0, 0.0, 0.0))  # looked at again (the sensor would after 5 minutes)
        d.tick()
        assert controller.store.get_stream(unique, "s").current_epoch == 1
        first, second = d.runs()
        assert second.tags["dagster/run_key"] == f"{first.tags['dagster/run_key']}-after-{first.run_id}"
