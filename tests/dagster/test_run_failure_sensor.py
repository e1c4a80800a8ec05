"""The run-failure sensor: a run that really failed (executed in process) is reported as one JSON line
that is both the structured log line and the EMF metric the alarm's metric filter reads."""

import json

from dagster import DagsterInstance, build_run_status_sensor_context, job, op

from dagster_project.definitions import defs
from dagster_project.observability import run_failure_reporter


@op
def refuse():
    raise RuntimeError("the table is gone")


@job
def doomed():
    refuse()


def test_a_failed_run_is_one_line_with_its_metric(capsys):
    instance = DagsterInstance.ephemeral()
    result = doomed.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    capsys.readouterr()
    context = build_run_status_sensor_context(
        sensor_name="run_failure_reporter", dagster_instance=instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event()).for_run_failure()
    run_failure_reporter(context)
    (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert line["event"] == "run_failed" and line["level"] == "error"
    assert (line["job"], line["run_id"], line["service"]) == ("doomed", result.run_id, "dagster")
    assert line["RunsFailed"] == 1  # a single number: the metric filter reads $.RunsFailed
    (directive,) = line["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Rillet"
    assert sorted(directive["Dimensions"][0]) == ["job", "service"]
    assert [m["Name"] for m in directive["Metrics"]] == ["RunsFailed"]


def test_the_sensor_is_deployed_and_on_by_default():
    sensor = defs.get_sensor_def("run_failure_reporter")
    assert sensor.default_status.value == "RUNNING"
