"""What tells an operator that something broke, and what keeps the bookkeeping bounded.

Static over the parsed HCL and the rendered Dagster instance (no AWS account here): every alarm the
runbook (docs/operations.md) names exists and publishes to the one SNS topic, the event rules reach
that topic and its policy lets them, the database grows by itself, ticks are purged.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from dagster._core.instance.config import dagster_instance_config
from test_terraform import ROOT, TF_DIR, Terraform, _text, as_list, blocks, parse_terraform, refs, statements

RUNBOOK = ROOT / "docs" / "operations.md"
TOPIC = ("aws_sns_topic", "alarms")
# What must be watched: (namespace, metric) of an alarm, by what it means to the operator.
WATCHED = {
    "function errors": ("AWS/Lambda", "Errors"),
    "function throttles": ("AWS/Lambda", "Throttles"),
    "Function URL 5xx": ("AWS/Lambda", "Url5xxCount"),
    "requests near the timeout": ("AWS/Lambda", "Duration"),
    "concurrency near the reservation": ("AWS/Lambda", "ConcurrentExecutions"),
    "table throttles": ("AWS/DynamoDB", "ReadThrottleEvents"),
    "table system errors": ("AWS/DynamoDB", "SystemErrors"),
    "no Dagster daemon": ("AWS/ECS", "CPUUtilization"),
    "daemon failing ticks": ("Rillet/Dagster", "DaemonErrors"),
    "database storage": ("AWS/RDS", "FreeStorageSpace"),
    "database CPU credits": ("AWS/RDS", "CPUCreditBalance"),
    "Spark job failures": ("AWS/EMRServerless", "FailedJobs"),
    "failed Dagster runs": ("Rillet", "RunsFailed"),
    "background work that keeps failing": ("Rillet", "WorkSetAside"),
    "subscribers silent, retention fallback due": ("Rillet", "FallbackImminent"),
}


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return parse_terraform(TF_DIR)


def _metrics(alarm: dict) -> set[tuple[str, str]]:
    found = set()
    if alarm.get("metric_name"):
        found.add((alarm.get("namespace"), alarm["metric_name"]))
    for query in blocks(alarm, "metric_query"):
        for metric in blocks(query, "metric"):
            found.add((metric.get("namespace"), metric.get("metric_name")))
    text = _text(alarm)  # dynamic "metric_query" blocks: the metric names are in their for_each
    for namespace in ("AWS/DynamoDB",):
        if namespace in text:
            found |= {(namespace, m) for m in re.findall(r"(\w*ThrottleEvents|SystemErrors)", text)}
    return found


def test_every_watched_metric_has_an_alarm_that_publishes(tf):
    alarms = tf.of_type("aws_cloudwatch_metric_alarm")
    watched = {}
    for name, alarm in alarms.items():
        assert "local.alarm_actions" in _text(alarm.get("alarm_actions")), f"alarm {name} notifies no one"
        for metric in _metrics(alarm):
            watched[metric] = name
    missing = {what: metric for what, metric in WATCHED.items() if metric not in watched}
    assert not missing, f"no alarm for {missing}"
    assert TOPIC in refs(tf.locals["alarm_actions"])


def _json_filter_matches(pattern: str, event: dict) -> bool:
    """CloudWatch's JSON filter for the form the daemon filter uses: $.key = "value" (a trailing * a
    prefix), joined by && and ||, with parentheses."""
    def term(m: re.Match) -> str:
        key, value = m.group(1), m.group(2)
        actual = str(event.get(key, ""))
        ok = actual.startswith(value[:-1]) if value.endswith("*") else actual == value
        return " True " if ok else " False "

    pattern = pattern.replace('\\"', '"').strip()  # as python-hcl2 gives it: the HCL string's escapes kept
    expression = re.sub(r'\$\.(\w+)\s*=\s*"([^"]*)"', term, pattern[1:-1])
    return eval(expression.replace("&&", " and ").replace("||", " or "))  # only True, False, and, or, ()


def test_the_daemon_error_metric_is_fed_from_its_log(tf):
    metric_filter = tf.of_type("aws_cloudwatch_log_metric_filter")["dagster_daemon_errors"]
    assert ("aws_cloudwatch_log_group", "dagster") in refs(metric_filter.get("log_group_name"))
    transformation = blocks(metric_filter, "metric_transformation")[0]
    assert (transformation["namespace"], transformation["name"]) == WATCHED["daemon failing ticks"]
    daemon = _text(tf.of_type("aws_ecs_task_definition")["daemon"]["container_definitions"])
    assert '"--log-format", "json"' in daemon.replace('\\"', '"'), "the daemon must log JSON for the filter"
    script = ("import logging; from dagster._utils.log import configure_loggers; "
              "configure_loggers(formatter='json', log_level='INFO'); "
              "logging.getLogger('dagster.daemon.SensorDaemon').error('Sensor daemon caught an error'); "
              "logging.getLogger('dagster.daemon.SensorDaemon').info('Checking for new runs'); "
              "logging.getLogger('dagster').error('a run failed')")
    lines = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           timeout=120).stdout.splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert [_json_filter_matches(metric_filter["pattern"], e) for e in events] == [True, False, False], events


def test_the_dagster_line_metrics_are_fed_from_the_lines_the_code_writes(tf, capsys):
    """Each filter on the Dagster log group matches the lines of its event and reads a number and
    every dimension from them: the lines the sensor and the retention job really write."""
    from aws_lambda_powertools.metrics import MetricUnit
    from dagster import build_sensor_context

    from controlplane.retention import Decision, SubscriberStatus
    from dagster_project.attempts import Attempts
    from dagster_project.observability import emit, emit_retention_metrics
    from rillet.models import ConsumptionLimits

    minute = 60_000
    silent = [SubscriberStatus("s/readers", False, 4096, 9 * minute)]
    emit("dagster", {"RunsFailed": (1, MetricUnit.Count)}, {"job": "retention_job"}, level="error",
         event="run_failed", run_id="r1", message="boom")
    with build_sensor_context() as context:
        Attempts("abort_expired_transactions_job", []).report(context, ["s/a/txn-1"])
    emit_retention_metrics([Decision("s/a", "kept", "no active subscriber", consumption=True, subscribers=silent,
                                     limits=ConsumptionLimits(subscriber_timeout_ms=10 * minute)),
                            Decision("s/plain", "truncated", "time")])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["event"] for line in lines] == ["run_failed", "work_set_aside", "retention_stream",
                                                 "retention_subscriber"]
    filters = tf.of_type("aws_cloudwatch_log_metric_filter")["dagster_lines"]
    metrics = tf.locals["dagster_line_metrics"]
    assert "local.dagster_line_metrics" in _text(filters["for_each"])
    assert ("aws_cloudwatch_log_group", "dagster") in refs(filters.get("log_group_name"))
    transformation = blocks(filters, "metric_transformation")[0]
    assert transformation["namespace"] == "Rillet" and "${each.key}" in transformation["value"]
    for name, spec in metrics.items():
        pattern = filters["pattern"].replace("${each.value.event}", spec["event"])
        matched = [line for line in lines if _json_filter_matches(pattern, line)]
        assert matched, f"no line feeds {name}"
        for line in matched:
            assert isinstance(line.get(name), (int, float)), (name, line)
            assert all(line.get(selector.removeprefix("$.")) for selector in spec["dimensions"].values()), line
    assert lines[2]["FallbackImminent"] == 1, "silent 9 of 10 minutes: the fallback is within a quarter"
    for alarm in ("dagster_run_failures", "dagster_work_set_aside", "retention_fallback_imminent"):
        alarm = tf.of_type("aws_cloudwatch_metric_alarm")[alarm]
        service = alarm["dimensions"]["service"]
        assert any(line["service"] == service and alarm["metric_name"] in line for line in lines), alarm


def test_the_daemon_alarm_fires_when_no_task_runs(tf):
    alarm = tf.of_type("aws_cloudwatch_metric_alarm")["dagster_daemon_running"]
    assert alarm["treat_missing_data"] == "breaching", "no datapoint is no daemon"
    assert ("aws_ecs_service", "daemon") in refs(alarm.get("dimensions"))


def test_event_rules_reach_the_topic(tf):
    rules = tf.of_type("aws_cloudwatch_event_rule")
    targets = tf.of_type("aws_cloudwatch_event_target")
    assert {"dagster_task_failures", "secret_rotation_failures"} <= set(rules)
    for name in rules:
        assert any(("aws_cloudwatch_event_rule", name) in refs(t.get("rule")) and TOPIC in refs(t.get("arn"))
                   for t in targets.values()), f"rule {name} publishes nowhere"
    policy = tf.data["aws_iam_policy_document"]["alarms_topic"]
    services = {i for s in statements(policy) for p in blocks(s, "principals") for i in as_list(p.get("identifiers"))}
    assert {"events.amazonaws.com", "budgets.amazonaws.com"} <= services


def test_alarm_emails_subscribe(tf):
    subscription = tf.of_type("aws_sns_topic_subscription")["alarm_emails"]
    assert subscription["protocol"] == "email" and "var.alarm_emails" in _text(subscription.get("for_each"))
    budget = tf.of_type("aws_budgets_budget")["monthly"]
    assert "var.monthly_budget_usd" in _text(budget.get("count")), "the budget is optional"
    assert all(TOPIC in refs(n.get("subscriber_sns_topic_arns")) for n in blocks(budget, "notification"))


def test_the_database_grows_and_ticks_are_purged(tf, monkeypatch, tmp_path):
    db = tf.of_type("aws_db_instance")["dagster"]
    assert "max_allocated_storage" in db, "RDS storage autoscaling"
    from test_dagster_emr import render_instance

    rendered = render_instance({"max_concurrent_runs": "4", "run_task_definition": "f", "cluster": "c",
                                "subnets": json.dumps(["s"]), "security_groups": json.dumps(["g"])})
    (tmp_path / "dagster.yaml").write_text(rendered)
    for name in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_HOST", "DAGSTER_PG_DB", "DAGSTER_PG_SECRET_ARN", "AWS_REGION"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("DAGSTER_PG_PORT", "5432")
    config, _ = dagster_instance_config(str(tmp_path), "dagster.yaml")
    sensor = config["retention"]["sensor"]["purge_after_days"]
    assert 0 < sensor["skipped"] <= 7 and sensor["success"] > 0 and sensor["failure"] > 0
    assert config["retention"]["schedule"]["purge_after_days"] > 0


def test_per_stream_metrics_are_kept_only_for_the_listed_streams(tf, capsys):
    """The deployment-wide metrics have the service dimension alone (one metric each, whatever the
    number of streams); the per-stream and per-subscriber ones come only from the lines of the streams
    in var.stream_metrics, and each line they match carries every dimension."""
    from controlplane.retention import Decision, SubscriberStatus
    from dagster_project.observability import emit_retention_metrics
    from rillet.models import ConsumptionLimits

    limits = ConsumptionLimits(subscriber_timeout_ms=600_000)
    emit_retention_metrics([
        Decision(stream, "kept", "subscribers behind", consumption=True, limits=limits,
                 subscribers=[SubscriberStatus(f"{stream.split('/')[0]}/readers", True, 4096, 1_000)])
        for stream in ("s/listed", "s/other")])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["stream"] for line in lines} == {"s/listed", "s/other"}

    assert all(spec["dimensions"] == {"service": "$.service"} for spec in tf.locals["dagster_line_metrics"].values())
    filters = tf.of_type("aws_cloudwatch_log_metric_filter")["stream_lines"]
    assert "var.stream_metrics" in _text(filters["for_each"])
    rendered = _text(tf.locals["listed_streams"]).replace('\\"', '"')
    assert "var.stream_metrics" in rendered and '"$.stream = "${stream}""' in rendered, rendered
    listed = '$.stream = "s/listed"'  # local.listed_streams with stream_metrics = ["s/listed"]
    for name, spec in tf.locals["stream_line_metrics"].items():
        pattern = filters["pattern"].replace("${each.value.event}", spec["event"])
        pattern = pattern.replace("${local.listed_streams}", listed)
        matched = [line for line in lines if _json_filter_matches(pattern, line)]
        assert matched and {line["stream"] for line in matched} == {"s/listed"}, (name, matched)
        for line in matched:
            assert isinstance(line.get(name), (int, float)), (name, line)
            assert all(line.get(selector.removeprefix("$.")) for selector in spec["dimensions"].values()), line


def test_the_runbook_covers_the_alarms_and_the_restore(tf):
    text = RUNBOOK.read_text()
    for alarm in tf.of_type("aws_cloudwatch_metric_alarm").values():
        suffix = re.sub(r"^\$\{[^}]*\}", "", _text(alarm["alarm_name"]))
        assert suffix in text, f"docs/operations.md does not explain the alarm *{suffix}"
    for needed in ("restore-table-to-point-in-time", "PITR", "versioning", "Rotation", "Quotas", "Grants",
                   "Rollback"):
        assert needed in text, f"docs/operations.md says nothing of {needed}"


def test_the_tails_memory_metric_is_fed_by_the_handlers_own_warning(tf, monkeypatch):
    """The tails function sends no REPORT lines (system_log_level WARN), so its memory alarm counts the
    warning its handler logs while an instance's peak is at 80 % of the function's memory: the filter
    matches that very line (and not an ordinary one) and reads the peak from it, at most once a minute."""
    import resource

    from lambdas.tails import handler as tails

    metric_filter = tf.of_type("aws_cloudwatch_log_metric_filter")["tails_memory"]
    assert ("aws_cloudwatch_log_group", "tails") in refs(metric_filter.get("log_group_name"))
    transformation = blocks(metric_filter, "metric_transformation")[0]
    assert transformation["value"] == "$.max_memory_used_mb"
    peak_kib = {"now": 110 * 1024}
    monkeypatch.setattr(resource, "getrusage", lambda _: type("Usage", (), {"ru_maxrss": peak_kib["now"]})())
    monkeypatch.setattr(tails, "_memory_warned_at", float("-inf"))
    lines = io.StringIO()  # the logger's own handler writes there (it took sys.stdout when first imported)
    monkeypatch.setattr(tails.logger.registered_handler, "stream", lines)
    tails.warn_if_memory_high(128)  # 110 of 128 MB: high
    tails.warn_if_memory_high(128)  # again within the minute: no second line
    peak_kib["now"] = 50 * 1024
    monkeypatch.setattr(tails, "_memory_warned_at", float("-inf"))
    tails.warn_if_memory_high(128)  # 50 of 128 MB: fine
    tails.logger.info("an ordinary line")
    events = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert [_json_filter_matches(metric_filter["pattern"], e) for e in events] == [True, False], events
    assert events[0]["max_memory_used_mb"] == 110 and events[0]["memory_size_mb"] == 128
