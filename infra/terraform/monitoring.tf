# What tells an operator that something broke: CloudWatch alarms and EventBridge rules publishing to one
# SNS topic (alarm_emails subscribe to it), a dashboard of the functions and the metrics they emit, and
# an optional monthly budget. docs/operations.md says what each alarm means and what to do.
#
# Cost: $0.10 a month per metric an alarm watches; with the defaults (no reservations, no budget) 25
# one-metric alarms and 6 metric-math alarms of 32 metrics, $5.70 a month, plus the dashboard ($3; free
# for the first three in an account) and the log metric filters' custom metrics at $0.30 each, billed by
# the hour they receive data: 10 with the defaults (the tails memory, the daemon's errors and 8 from the
# Dagster lines), at most $3.00, and those of var.stream_metrics (docs/operations.md, Cost of metrics).

locals {
  alarm_actions = [aws_sns_topic.alarms.arn]
  # Functions with a reservation: their concurrency alarm fires at 80 % of it.
  reserved_functions = { for name, limit in var.reserved_concurrency : name => limit if limit != null }
  # The DynamoDB operations the code makes (SystemErrors is published per operation).
  dynamodb_operations = ["GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "BatchGetItem", "BatchWriteItem", "TransactWriteItems"]
  tables = {
    metadata = aws_dynamodb_table.metadata.name
    segments = aws_dynamodb_table.segments.name
  }
  table_indexes = {
    metadata = sort([for index in aws_dynamodb_table.metadata.global_secondary_index : index.name])
    segments = sort([for index in aws_dynamodb_table.segments.global_secondary_index : index.name])
  }
}

resource "aws_sns_topic" "alarms" {
  #checkov:skip=CKV_AWS_26:CloudWatch alarms cannot publish to a topic encrypted with the AWS managed key (alias/aws/sns); alarm messages carry metric names, no data
  name = "${var.name_prefix}-alarms"
}

resource "aws_sns_topic_subscription" "alarm_emails" {
  for_each = toset(var.alarm_emails)

  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.value
}

# CloudWatch alarms of this account publish with the topic's default policy; EventBridge rules and
# Budgets need a statement of their own.
data "aws_iam_policy_document" "alarms_topic" {
  statement {
    sid       = "AccountOwner"
    actions   = ["sns:Publish", "sns:Subscribe", "sns:GetTopicAttributes", "sns:SetTopicAttributes"]
    resources = [aws_sns_topic.alarms.arn]

    principals {
      type        = "AWS"
      identifiers = ["arn:aws:iam::${local.account_id}:root"]
    }
  }

  statement {
    sid       = "AlarmsEventsAndBudgets"
    actions   = ["sns:Publish"]
    resources = [aws_sns_topic.alarms.arn]

    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com", "events.amazonaws.com", "budgets.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_sns_topic_policy" "alarms" {
  arn    = aws_sns_topic.alarms.arn
  policy = data.aws_iam_policy_document.alarms_topic.json
}

# -- functions ----------------------------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "function_errors" {
  for_each = local.function_names

  alarm_name          = "${each.value}-errors"
  alarm_description   = "The ${each.key} function failed invocations (unhandled errors, timeouts): its log group says why."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = each.value }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 5
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_lambda_function.controller_api, aws_lambda_function.append, aws_lambda_function.read, aws_lambda_function.tails]
}

resource "aws_cloudwatch_metric_alarm" "function_throttles" {
  for_each = local.function_names

  alarm_name          = "${each.value}-throttles"
  alarm_description   = "The ${each.key} function was throttled (429 to clients, which retry): its reservation or the account's concurrency is too small."
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  dimensions          = { FunctionName = each.value }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 10
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_lambda_function.controller_api, aws_lambda_function.append, aws_lambda_function.read, aws_lambda_function.tails]
}

resource "aws_cloudwatch_metric_alarm" "function_url_5xx" {
  for_each = local.function_names

  alarm_name          = "${each.value}-url-5xx"
  alarm_description   = "The ${each.key} Function URL answered 5xx (a 500 of the handler, or Lambda's own errors)."
  namespace           = "AWS/Lambda"
  metric_name         = "Url5xxCount"
  dimensions          = { FunctionName = each.value }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 5
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_lambda_function.controller_api, aws_lambda_function.append, aws_lambda_function.read, aws_lambda_function.tails]
}

# Requests that run close to the timeout are about to fail as timeouts (a slow dependency, a hot
# partition retried, too little memory); p99 over 80 % of the timeout in 2 of 3 periods of 5 minutes.
resource "aws_cloudwatch_metric_alarm" "function_duration" {
  for_each = local.function_names

  alarm_name          = "${each.value}-duration"
  alarm_description   = "The ${each.key} function's p99 duration passed 80 % of its ${local.function_timeouts[each.key]} s timeout: requests are about to time out."
  namespace           = "AWS/Lambda"
  metric_name         = "Duration"
  dimensions          = { FunctionName = each.value }
  extended_statistic  = "p99"
  unit                = "Milliseconds"
  period              = 300
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  threshold           = local.function_timeouts[each.key] * 1000 * 0.8
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_lambda_function.controller_api, aws_lambda_function.append, aws_lambda_function.read, aws_lambda_function.tails]
}

resource "aws_cloudwatch_metric_alarm" "function_concurrency" {
  for_each = local.reserved_functions

  alarm_name          = "${local.function_names[each.key]}-concurrency"
  alarm_description   = "The ${each.key} function ran at 80 % of its reserved concurrency (${each.value}): raise the reservation before clients are throttled."
  namespace           = "AWS/Lambda"
  metric_name         = "ConcurrentExecutions"
  dimensions          = { FunctionName = local.function_names[each.key] }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  threshold           = ceil(each.value * 0.8)
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# The tails function runs with little memory (var.tails_memory_mb) to keep idle readers cheap, and
# without Lambda's REPORT lines (lambda.tf): its handler logs a warning, at most once a minute per
# instance, while an instance's peak memory is at 80 % of the function's or more. The alarm fires on the
# first such line, before an instance runs out (an out-of-memory kill shows only as a function error).
resource "aws_cloudwatch_log_metric_filter" "tails_memory" {
  name           = "${local.function_names.tails}-max-memory-used"
  log_group_name = aws_cloudwatch_log_group.tails.name
  pattern        = "{ $.message = \"tails instance memory high\" }"

  metric_transformation {
    name      = "TailsMaxMemoryUsedMB"
    namespace = "Rillet"
    value     = "$.max_memory_used_mb"
    unit      = "Megabytes"
  }
}

resource "aws_cloudwatch_metric_alarm" "tails_memory" {
  alarm_name          = "${local.function_names.tails}-memory"
  alarm_description   = "A tails function instance used 80 % of its ${var.tails_memory_mb} MB: raise tails_memory_mb before instances run out (docs/operations.md)."
  namespace           = "Rillet"
  metric_name         = "TailsMaxMemoryUsedMB"
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = floor(var.tails_memory_mb * 0.8)
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_cloudwatch_log_metric_filter.tails_memory]
}

# -- tables -------------------------------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "table_throttles" {
  for_each = local.tables

  alarm_name          = "${each.value}-throttles"
  alarm_description   = "Requests to the ${each.key} table were throttled (a hot partition, or the on-demand table's share of the account limit)."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 10
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "throttles"
    expression  = "reads + writes"
    label       = "throttled events"
    return_data = true
  }

  dynamic "metric_query" {
    for_each = { reads = "ReadThrottleEvents", writes = "WriteThrottleEvents" }
    content {
      id = metric_query.key
      metric {
        namespace   = "AWS/DynamoDB"
        metric_name = metric_query.value
        dimensions  = { TableName = each.value }
        period      = 300
        stat        = "Sum"
      }
    }
  }
}

# A query of an index, or an index that cannot keep up with the table's writes, is throttled on the
# index: DynamoDB publishes those events with the index's name as a dimension, apart from the table's.
# One alarm per table over its indexes' reads and writes (an alarm's metric math takes at most 10
# metrics: the metadata table's five indexes use all of them).
resource "aws_cloudwatch_metric_alarm" "index_throttles" {
  for_each = local.table_indexes

  alarm_name          = "${local.tables[each.key]}-index-throttles"
  alarm_description   = "Requests to an index of the ${each.key} table (${join(", ", each.value)}) were throttled: a hot index partition, or writes the index cannot absorb."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 10
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "throttles"
    expression  = "SUM(METRICS())"
    label       = "throttled index events"
    return_data = true
  }

  dynamic "metric_query" {
    for_each = { for pair in setproduct(range(length(each.value)), ["ReadThrottleEvents", "WriteThrottleEvents"]) : "${substr(pair[1], 0, 1)}${pair[0]}" => { index = each.value[pair[0]], metric = pair[1] } }
    content {
      id = lower(metric_query.key)
      metric {
        namespace   = "AWS/DynamoDB"
        metric_name = metric_query.value.metric
        dimensions  = { TableName = local.tables[each.key], GlobalSecondaryIndexName = metric_query.value.index }
        period      = 300
        stat        = "Sum"
      }
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "table_system_errors" {
  for_each = local.tables

  alarm_name          = "${each.value}-system-errors"
  alarm_description   = "DynamoDB answered 500 to requests on the ${each.key} table (the code retries them; many mean a service problem)."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 5
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "errors"
    expression  = "SUM(METRICS())"
    label       = "system errors"
    return_data = true
  }

  dynamic "metric_query" {
    for_each = local.dynamodb_operations
    content {
      id = "op${metric_query.key}"
      metric {
        namespace   = "AWS/DynamoDB"
        metric_name = "SystemErrors"
        dimensions  = { TableName = each.value, Operation = metric_query.value }
        period      = 300
        stat        = "Sum"
      }
    }
  }
}

# -- Dagster ------------------------------------------------------------------------------------------

# Without Container Insights, ECS publishes a service's CPU only while one of its tasks runs: no
# datapoint for 5 minutes means no daemon (no sensors, no schedules: no tiering, retention, timeouts).
resource "aws_cloudwatch_metric_alarm" "dagster_daemon_running" {
  alarm_name          = "${local.dagster_name}-daemon-not-running"
  alarm_description   = "No Dagster daemon task is running: tiering, retention, transaction timeouts, the sweeper and watermarks have stopped."
  namespace           = "AWS/ECS"
  metric_name         = "CPUUtilization"
  dimensions          = { ClusterName = aws_ecs_cluster.dagster.name, ServiceName = aws_ecs_service.daemon.name }
  statistic           = "SampleCount"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# The daemon logs every failed tick (a sensor or schedule that raised, a database it cannot reach, a run
# it cannot launch) at level error on a logger dagster.daemon.<Daemon>; it logs JSON (--log-format json
# in its task definition: the default "colored" format puts ANSI codes around the level).
resource "aws_cloudwatch_log_metric_filter" "dagster_daemon_errors" {
  name           = "${local.dagster_name}-daemon-errors"
  log_group_name = aws_cloudwatch_log_group.dagster.name
  pattern        = "{ $.logger = \"dagster.daemon.*\" && ($.level = \"error\" || $.level = \"critical\") }"

  metric_transformation {
    name          = "DaemonErrors"
    namespace     = "Rillet/Dagster"
    value         = "1"
    default_value = "0"
  }
}

resource "aws_cloudwatch_metric_alarm" "dagster_daemon_errors" {
  alarm_name          = "${local.dagster_name}-daemon-failing-ticks"
  alarm_description   = "The Dagster daemon fails ticks (sensors, schedules, run launches) for 15 minutes: see its log stream (dagster/daemon/...)."
  namespace           = "Rillet/Dagster"
  metric_name         = "DaemonErrors"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 3
  datapoints_to_alarm = 3
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_cloudwatch_log_metric_filter.dagster_daemon_errors]
}

# A Dagster task that failed to start (image pull, secret, capacity) or whose container exited non-zero:
# webserver, daemon, or a run task.
resource "aws_cloudwatch_event_rule" "dagster_task_failures" {
  name        = "${local.dagster_name}-task-failures"
  description = "Dagster ECS tasks that failed to start or exited non-zero"
  event_pattern = jsonencode({
    source        = ["aws.ecs"]
    "detail-type" = ["ECS Task State Change"]
    detail = {
      clusterArn = [aws_ecs_cluster.dagster.arn]
      lastStatus = ["STOPPED"]
      "$or" = [
        { stopCode = ["TaskFailedToStart"] },
        { containers = { exitCode = [{ "anything-but" = 0 }] } },
      ]
    }
  })
}

resource "aws_cloudwatch_event_target" "dagster_task_failures" {
  rule = aws_cloudwatch_event_rule.dagster_task_failures.name
  arn  = aws_sns_topic.alarms.arn
}

resource "aws_cloudwatch_metric_alarm" "dagster_db_storage" {
  alarm_name          = "${local.dagster_name}-db-free-storage"
  alarm_description   = "Dagster's database has under 2 GB free (storage autoscaling grows it up to dagster_db_max_storage_gb; past that, runs and ticks stop being recorded)."
  namespace           = "AWS/RDS"
  metric_name         = "FreeStorageSpace"
  dimensions          = { DBInstanceIdentifier = aws_db_instance.dagster.identifier }
  statistic           = "Minimum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 2 * 1024 * 1024 * 1024
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "dagster_db_cpu_credits" {
  alarm_name          = "${local.dagster_name}-db-cpu-credits"
  alarm_description   = "Dagster's burstable database is running out of CPU credits (then it runs at baseline, or bills surplus credits in unlimited mode): a larger class or fewer runs."
  namespace           = "AWS/RDS"
  metric_name         = "CPUCreditBalance"
  dimensions          = { DBInstanceIdentifier = aws_db_instance.dagster.identifier }
  statistic           = "Minimum"
  period              = 300
  evaluation_periods  = 3
  threshold           = 20
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# The database secret's rotation failed: RDS keeps the old password, the tasks keep working, but the
# next attempt must be watched (docs/operations.md, Rotation).
resource "aws_cloudwatch_event_rule" "secret_rotation_failures" {
  name        = "${local.dagster_name}-secret-rotation-failures"
  description = "Rotation of the Dagster database secret failed"
  event_pattern = jsonencode({
    source = ["aws.secretsmanager"]
    detail = {
      eventName           = ["RotationFailed", "RotationAbandoned"]
      additionalEventData = { SecretId = [aws_db_instance.dagster.master_user_secret[0].secret_arn] }
    }
  })
}

resource "aws_cloudwatch_event_target" "secret_rotation_failures" {
  rule = aws_cloudwatch_event_rule.secret_rotation_failures.name
  arn  = aws_sns_topic.alarms.arn
}

# -- EMR ----------------------------------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "emr_failed_jobs" {
  alarm_name          = "${var.name_prefix}-spark-failed-jobs"
  alarm_description   = "A Spark job on the EMR Serverless application failed (an export): its Dagster run and the job's Spark UI say why."
  namespace           = "AWS/EMRServerless"
  metric_name         = "FailedJobs"
  dimensions          = { ApplicationId = aws_emrserverless_application.spark.id }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
}

# -- budget -------------------------------------------------------------------------------------------

resource "aws_budgets_budget" "monthly" {
  count = var.monthly_budget_usd == null ? 0 : 1

  name         = "${var.name_prefix}-monthly"
  budget_type  = "COST"
  limit_amount = tostring(var.monthly_budget_usd)
  limit_unit   = "USD"
  time_unit    = "MONTHLY"

  notification {
    comparison_operator       = "GREATER_THAN"
    threshold                 = 80
    threshold_type            = "PERCENTAGE"
    notification_type         = "FORECASTED"
    subscriber_sns_topic_arns = [aws_sns_topic.alarms.arn]
  }

  notification {
    comparison_operator       = "GREATER_THAN"
    threshold                 = 100
    threshold_type            = "PERCENTAGE"
    notification_type         = "ACTUAL"
    subscriber_sns_topic_arns = [aws_sns_topic.alarms.arn]
  }
}

# -- what the Dagster code location reports (dagster_project/observability.py) ------------------------

# Its sensor and the retention job write one JSON line per event to stdout (the Dagster log group): a
# structured log line that is also an EMF document (namespace Rillet, dimension service). The awslogs
# driver does not mark lines as EMF, so these filters publish the metrics the alarms and the dashboard
# read.
#
# Cost: every distinct set of dimension values is a custom metric at $0.30 a month. So the
# deployment-wide metrics have the one dimension service (the Maximum over streams is the worst stream):
# 8 metrics, $2.40 a month at most. Per stream and per subscriber only for the streams listed in
# var.stream_metrics (at most 10): 3 metrics per listed stream and 2 per subscriber of it, $0.30 each
# (docs/operations.md, Cost of metrics). A line names its stream, so the log group holds every stream's
# figures whatever is listed (CloudWatch Logs Insights reads them for free but the scan).
locals {
  dagster_line_metrics = {
    RunsFailed              = { event = "run_failed", dimensions = { service = "$.service" } }
    WorkSetAside            = { event = "work_set_aside", dimensions = { service = "$.service" } }
    FallbackImminent        = { event = "retention_stream", dimensions = { service = "$.service" } }
    NoActiveSubscriber      = { event = "retention_stream", dimensions = { service = "$.service" } }
    NoSubscriber            = { event = "retention_stream", dimensions = { service = "$.service" } }
    UnconsumedBytes         = { event = "retention_stream", dimensions = { service = "$.service" } }
    SubscriberLagBytes      = { event = "retention_subscriber", dimensions = { service = "$.service" } }
    SubscriberSilentSeconds = { event = "retention_subscriber", dimensions = { service = "$.service" } }
  }
  stream_line_metrics = {
    NoActiveSubscriber      = { event = "retention_stream", dimensions = { service = "$.service", stream = "$.stream" } }
    NoSubscriber            = { event = "retention_stream", dimensions = { service = "$.service", stream = "$.stream" } }
    UnconsumedBytes         = { event = "retention_stream", dimensions = { service = "$.service", stream = "$.stream" } }
    SubscriberLagBytes      = { event = "retention_subscriber", dimensions = { service = "$.service", stream = "$.stream", group = "$.group" } }
    SubscriberSilentSeconds = { event = "retention_subscriber", dimensions = { service = "$.service", stream = "$.stream", group = "$.group" } }
  }
  listed_streams = join(" || ", [for stream in var.stream_metrics : "$.stream = \"${stream}\""])
}

resource "aws_cloudwatch_log_metric_filter" "dagster_lines" {
  for_each       = local.dagster_line_metrics
  name           = "${local.dagster_name}-${each.key}"
  log_group_name = aws_cloudwatch_log_group.dagster.name
  pattern        = "{ $.event = \"${each.value.event}\" }"

  metric_transformation {
    name       = each.key
    namespace  = "Rillet"
    value      = "$.${each.key}"
    dimensions = each.value.dimensions
  }
}

resource "aws_cloudwatch_log_metric_filter" "stream_lines" {
  for_each       = length(var.stream_metrics) > 0 ? local.stream_line_metrics : {}
  name           = "${local.dagster_name}-${each.key}-per-stream"
  log_group_name = aws_cloudwatch_log_group.dagster.name
  pattern        = "{ $.event = \"${each.value.event}\" && (${local.listed_streams}) }"

  metric_transformation {
    name       = each.key
    namespace  = "Rillet"
    value      = "$.${each.key}"
    dimensions = each.value.dimensions
  }
}

# The run-failure sensor reports every failed run (a maintenance job, retention, an export) once.
resource "aws_cloudwatch_metric_alarm" "dagster_run_failures" {
  alarm_name          = "${local.dagster_name}-run-failures"
  alarm_description   = "A Dagster run failed: its line (event run_failed) in the Dagster log group names the job, the run and the error."
  namespace           = "Rillet"
  metric_name         = "RunsFailed"
  dimensions          = { service = "dagster" }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_cloudwatch_log_metric_filter.dagster_lines]
}

# Work that keeps failing: a sensor set aside items (transactions, reader groups, streams) that 3 runs
# within an hour left unfinished (dagster_project/attempts.py); every tick that sets them aside writes a
# line, so the alarm stays on until they are done or their failures age out and they are tried again.
resource "aws_cloudwatch_metric_alarm" "dagster_work_set_aside" {
  alarm_name          = "${local.dagster_name}-work-set-aside"
  alarm_description   = "A Dagster sensor set aside work that kept failing: its line (event work_set_aside) names the job and the items; the unfinished runs' tags (rillet/failed-items) and metadata say why."
  namespace           = "Rillet"
  metric_name         = "WorkSetAside"
  dimensions          = { service = "dagster" }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_cloudwatch_log_metric_filter.dagster_lines]
}

# A consumption-based stream whose subscribers are all silent and will be ignored within a quarter of
# the subscriber timeout (then the fallback time/size policy, or without one only the maximum, applies
# and data they have not read may be truncated). One datapoint per retention run (every 30 minutes by
# default): an hour's period keeps the alarm on between two runs.
resource "aws_cloudwatch_metric_alarm" "retention_fallback_imminent" {
  alarm_name          = "${local.dagster_name}-retention-fallback-imminent"
  alarm_description   = "A consumption-based stream's subscribers are silent and its fallback applies soon: its line (event retention_stream, FallbackImminent 1) names the stream."
  namespace           = "Rillet"
  metric_name         = "FallbackImminent"
  dimensions          = { service = "retention" }
  statistic           = "Maximum"
  period              = 3600
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  depends_on = [aws_cloudwatch_log_metric_filter.dagster_lines]
}

# -- dashboard ----------------------------------------------------------------------------------------

resource "aws_cloudwatch_dashboard" "rillet" {
  dashboard_name = var.name_prefix
  dashboard_body = jsonencode({
    widgets = [
      {
        type = "metric", x = 0, y = 0, width = 12, height = 6
        properties = {
          title  = "Appended (EMF metrics of the append function)"
          region = local.region
          stat   = "Sum"
          period = 300
          metrics = [
            ["Rillet", "AppendedEvents", "service", "append"],
            ["Rillet", "AppendedBytes", "service", "append", { yAxis = "right" }],
          ]
        }
      },
      {
        type = "metric", x = 12, y = 0, width = 12, height = 6
        properties = {
          title   = "Function invocations, errors, throttles"
          region  = local.region
          stat    = "Sum"
          period  = 300
          metrics = flatten([for name in values(local.function_names) : [["AWS/Lambda", "Invocations", "FunctionName", name], ["AWS/Lambda", "Errors", "FunctionName", name], ["AWS/Lambda", "Throttles", "FunctionName", name]]])
        }
      },
      {
        type = "metric", x = 0, y = 6, width = 12, height = 6
        properties = {
          title   = "Function duration p99 (ms)"
          region  = local.region
          stat    = "p99"
          period  = 300
          metrics = [for name in values(local.function_names) : ["AWS/Lambda", "Duration", "FunctionName", name]]
        }
      },
      {
        type = "metric", x = 12, y = 6, width = 12, height = 6
        properties = {
          title   = "Table capacity consumed"
          region  = local.region
          stat    = "Sum"
          period  = 300
          metrics = flatten([for table in values(local.tables) : [["AWS/DynamoDB", "ConsumedReadCapacityUnits", "TableName", table], ["AWS/DynamoDB", "ConsumedWriteCapacityUnits", "TableName", table]]])
        }
      },
      {
        type = "metric", x = 0, y = 12, width = 12, height = 6
        properties = {
          title  = "Dagster daemon: failed ticks, database free storage"
          region = local.region
          period = 300
          metrics = [
            ["Rillet/Dagster", "DaemonErrors", { stat = "Sum" }],
            ["AWS/RDS", "FreeStorageSpace", "DBInstanceIdentifier", aws_db_instance.dagster.identifier, { stat = "Minimum", yAxis = "right" }],
          ]
        }
      },
      {
        type = "metric", x = 12, y = 12, width = 12, height = 6
        properties = {
          title  = "Spark jobs (EMR Serverless)"
          region = local.region
          stat   = "Sum"
          period = 300
          metrics = [
            ["AWS/EMRServerless", "SuccessJobs", "ApplicationId", aws_emrserverless_application.spark.id],
            ["AWS/EMRServerless", "FailedJobs", "ApplicationId", aws_emrserverless_application.spark.id],
          ]
        }
      },
      {
        type = "metric", x = 0, y = 18, width = 12, height = 6
        properties = {
          title  = "Consumption-based retention: unconsumed bytes (worst, and per listed stream), failed runs"
          region = local.region
          period = 1800
          metrics = [
            ["Rillet", "UnconsumedBytes", "service", "retention", { stat = "Maximum", label = "most unconsumed (any stream)" }],
            [{ expression = "SEARCH('{Rillet,service,stream} service=\"retention\" MetricName=\"UnconsumedBytes\"', 'Maximum', 1800)", id = "unconsumed" }],
            ["Rillet", "FallbackImminent", "service", "retention", { stat = "Maximum", yAxis = "right" }],
            ["Rillet", "RunsFailed", "service", "dagster", { stat = "Sum", yAxis = "right" }],
          ]
        }
      },
      {
        type = "metric", x = 12, y = 18, width = 12, height = 6
        properties = {
          title  = "Subscribers: lag (bytes), silent for (seconds), streams without an active subscriber (worst, and per listed stream)"
          region = local.region
          period = 1800
          metrics = [
            ["Rillet", "SubscriberLagBytes", "service", "retention", { stat = "Maximum", label = "largest lag (any subscriber)" }],
            ["Rillet", "SubscriberSilentSeconds", "service", "retention", { stat = "Maximum", label = "longest silence (any subscriber)", yAxis = "right" }],
            [{ expression = "SEARCH('{Rillet,service,stream,group} service=\"retention\" MetricName=\"SubscriberLagBytes\"', 'Maximum', 1800)", id = "lag" }],
            [{ expression = "SEARCH('{Rillet,service,stream,group} service=\"retention\" MetricName=\"SubscriberSilentSeconds\"', 'Maximum', 1800)", id = "silent", yAxis = "right" }],
            [{ expression = "SEARCH('{Rillet,service,stream} service=\"retention\" MetricName=\"NoActiveSubscriber\"', 'Maximum', 1800)", id = "orphaned", yAxis = "right" }],
          ]
        }
      },
    ]
  })
}
