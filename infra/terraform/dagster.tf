# Dagster on ECS Fargate: the webserver and the daemon as two services; the maintenance jobs' runs as
# processes in the daemon's task, export runs as tasks of their own (dagster_project/run_launcher.py);
# run/event/schedule storage in RDS PostgreSQL. The instance
# configuration (templates/dagster.yaml.tftpl) is rendered here and handed to the containers as
# DAGSTER_INSTANCE_YAML; the image (Dockerfile) writes it into DAGSTER_HOME and carries the workspace.
#
# Storage is a single-AZ RDS PostgreSQL db.t4g.micro, not Aurora Serverless v2: the daemon queries the
# database on every sensor tick (every 10 s), so Aurora would never auto-pause and would bill at least
# 0.5 ACU around the clock (about $44 a month in us-east-1), while the micro instance with 20 GB of gp3
# is about $14. The database holds only Dagster's own bookkeeping: losing it loses run history, never
# stream data, so one AZ with 7 days of backups is enough.
#
# The webserver is private: no load balancer, no public address. Operators open the UI with an SSM
# port forward through ECS Exec (README.md, output dagster_ui_access).

locals {
  dagster_name = "${var.name_prefix}-dagster"
  # Family of the run task definition: the launcher resolves it to the latest revision at start-up.
  dagster_run_family = "${var.name_prefix}-dagster-run"
  dagster_home       = "/opt/dagster/home"
  dagster_image      = startswith(var.image_tag, "sha256:") ? "${aws_ecr_repository.rillet.repository_url}@${var.image_tag}" : "${aws_ecr_repository.rillet.repository_url}:${var.image_tag}"

  dagster_instance_yaml = templatefile("${path.module}/templates/dagster.yaml.tftpl", {
    max_concurrent_runs = var.dagster_max_concurrent_runs
    run_task_definition = local.dagster_run_family
    cluster             = aws_ecs_cluster.dagster.name
    subnets             = jsonencode(var.dagster_subnet_ids)
    security_groups     = jsonencode(var.dagster_security_group_ids)
  })

  # The environment the code reads (dataplane/deployment.py Deployment.from_env,
  # dagster_project/resources.py RilletDeployment.from_env) and the Dagster instance reads; every
  # container of the three task definitions gets all of it.
  dagster_environment = {
    AWS_REGION                = local.region # for the clients dagster-aws builds (ECS, EMR Serverless, Logs)
    RILLET_REGION             = local.region
    RILLET_METADATA_TABLE     = aws_dynamodb_table.metadata.name
    RILLET_SEGMENTS_TABLE     = aws_dynamodb_table.segments.name
    RILLET_BUCKET             = aws_s3_bucket.segments.bucket
    RILLET_CONTROLLER_URL     = aws_lambda_function_url.controller_api.function_url
    RILLET_EMR_APPLICATION_ID = aws_emrserverless_application.spark.id
    RILLET_EMR_JOB_ROLE_ARN   = aws_iam_role.emr_job.arn
    RILLET_EMR_ARTIFACTS_URI  = local.emr_artifacts_uri
    RILLET_SUBLOG_SHARDS      = tostring(var.sublog_shards)
    DAGSTER_HOME              = local.dagster_home
    DAGSTER_INSTANCE_YAML     = local.dagster_instance_yaml
    DAGSTER_PG_HOST           = aws_db_instance.dagster.address
    DAGSTER_PG_PORT           = tostring(aws_db_instance.dagster.port)
    DAGSTER_PG_DB             = aws_db_instance.dagster.db_name
    DAGSTER_PG_USERNAME       = aws_db_instance.dagster.username
    # The secret RDS rotates every 7 days: the instance's storage reads the password from it per
    # connection (dagster_project/postgres_storage.py), so no container holds a password that goes stale.
    DAGSTER_PG_SECRET_ARN = aws_db_instance.dagster.master_user_secret[0].secret_arn
  }

  dagster_log_configuration = {
    logDriver = "awslogs"
    options = {
      awslogs-group         = aws_cloudwatch_log_group.dagster.name
      awslogs-region        = local.region
      awslogs-stream-prefix = "dagster"
    }
  }
}

# -- image, cluster, logs -----------------------------------------------------------------------------

resource "aws_ecr_repository" "rillet" {
  #checkov:skip=CKV_AWS_136:images hold only public open-source code; the AWS managed AES-256 encryption is enough
  name                 = var.name_prefix
  image_tag_mutability = "IMMUTABLE"
  force_delete         = var.bucket_force_destroy

  image_scanning_configuration {
    scan_on_push = true
  }
}

# Every build is pushed under a new tag (the tags are immutable), so without a rule the repository
# keeps every image ever pushed at $0.10 per GB-month. Keep the newest var.ecr_images_kept images (the
# deployed one is among them unless that many newer builds were pushed and not deployed); untagged
# layers of failed pushes go after a day.
resource "aws_ecr_lifecycle_policy" "rillet" {
  repository = aws_ecr_repository.rillet.name
  policy = jsonencode({
    rules = [
      {
        rulePriority = 1
        description  = "Untagged images (interrupted pushes) after a day"
        selection    = { tagStatus = "untagged", countType = "sinceImagePushed", countUnit = "days", countNumber = 1 }
        action       = { type = "expire" }
      },
      {
        rulePriority = 2
        description  = "Only the newest ${var.ecr_images_kept} images"
        selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = var.ecr_images_kept }
        action       = { type = "expire" }
      },
    ]
  })
}

resource "aws_ecs_cluster" "dagster" {
  #checkov:skip=CKV_AWS_65:Container Insights bills about 26 custom metrics (~$8 a month) for two small services; Dagster's UI and the log group show what runs
  name = local.dagster_name

  setting {
    name  = "containerInsights"
    value = "disabled"
  }
}

resource "aws_cloudwatch_log_group" "dagster" {
  #checkov:skip=CKV_AWS_158:the logs carry run metadata, no stream payloads; CloudWatch's own encryption is enough and a CMK costs $1 a month
  #checkov:skip=CKV_AWS_338:retention is the operator's choice (var.log_retention_days), as for the functions
  name              = "/ecs/${local.dagster_name}"
  retention_in_days = var.log_retention_days
}

# -- database -----------------------------------------------------------------------------------------

data "aws_subnet" "dagster" {
  id = var.dagster_subnet_ids[0]
}

resource "aws_db_subnet_group" "dagster" {
  name       = local.dagster_name
  subnet_ids = var.dagster_subnet_ids
}

resource "aws_security_group" "dagster_db" {
  name        = "${local.dagster_name}-db"
  description = "Dagster PostgreSQL: reached only from the Dagster tasks"
  vpc_id      = data.aws_subnet.dagster.vpc_id
}

resource "aws_vpc_security_group_ingress_rule" "dagster_db" {
  for_each = toset(var.dagster_security_group_ids)

  security_group_id            = aws_security_group.dagster_db.id
  description                  = "PostgreSQL from the Dagster tasks"
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_db_instance" "dagster" {
  #checkov:skip=CKV_AWS_157:Dagster's run history is not worth a standby ($12 a month more); 7 days of backups restore it
  #checkov:skip=CKV_AWS_161:the tasks authenticate with the password in Secrets Manager; IAM tokens would need a refresh hook in dagster-postgres
  #checkov:skip=CKV_AWS_118:enhanced monitoring is not needed for a bookkeeping database; CloudWatch's basic metrics remain
  #checkov:skip=CKV_AWS_353:performance insights are not needed for a bookkeeping database
  #checkov:skip=CKV_AWS_354:performance insights are off, so there is nothing to encrypt
  #checkov:skip=CKV2_AWS_30:query logging would cost more than the database; errors are exported
  identifier                      = local.dagster_name
  engine                          = "postgres"
  engine_version                  = "16"
  instance_class                  = var.dagster_db_instance_class
  allocated_storage               = 20
  max_allocated_storage           = var.dagster_db_max_storage_gb
  storage_type                    = "gp3"
  storage_encrypted               = true
  db_name                         = "dagster"
  username                        = "dagster"
  manage_master_user_password     = true
  db_subnet_group_name            = aws_db_subnet_group.dagster.name
  vpc_security_group_ids          = [aws_security_group.dagster_db.id]
  publicly_accessible             = false
  multi_az                        = false
  backup_retention_period         = 7
  copy_tags_to_snapshot           = true
  auto_minor_version_upgrade      = true
  deletion_protection             = var.table_deletion_protection
  skip_final_snapshot             = !var.table_deletion_protection
  enabled_cloudwatch_logs_exports = ["postgresql"]

  # A fixed snapshot name would collide on the second destroy of a deployment of the same prefix (the
  # first snapshot stays). The database's security group is created and destroyed with it, and its id
  # is new each time: a unique suffix without another provider. Nothing reads the name back.
  final_snapshot_identifier = "${local.dagster_name}-final-${aws_security_group.dagster_db.id}"
}

# -- roles --------------------------------------------------------------------------------------------

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

# The execution role: ECS pulls the image and writes the log streams.
resource "aws_iam_role" "dagster_execution" {
  name               = "${local.dagster_name}-execution-${local.region}"
  description        = "ECS execution role of the Dagster tasks: image, logs"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy" "dagster_execution" {
  name   = "rillet-dagster-execution"
  role   = aws_iam_role.dagster_execution.id
  policy = data.aws_iam_policy_document.dagster_execution.json
}

data "aws_iam_policy_document" "dagster_execution" {
  # GetAuthorizationToken supports no resource-level permissions.
  statement {
    sid       = "EcrLogin"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }

  statement {
    sid       = "PullImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    resources = [aws_ecr_repository.rillet.arn]
  }

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.dagster.arn}:*"]
  }
}

# Every Dagster process reads the database password from the secret when it connects (the storage in
# dagster_project/postgres_storage.py), so each task role may read that one secret.
data "aws_iam_policy_document" "dagster_db_password" {
  statement {
    sid       = "DatabasePassword"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_db_instance.dagster.master_user_secret[0].secret_arn]
  }
}

resource "aws_iam_role_policy" "dagster_db_password" {
  for_each = {
    webserver = aws_iam_role.dagster_webserver.id
    daemon    = aws_iam_role.dagster_daemon.id
    run       = aws_iam_role.dagster_run.id
  }

  name   = "rillet-dagster-db-password"
  role   = each.value
  policy = data.aws_iam_policy_document.dagster_db_password.json
}

# The webserver reads the database and serves the UI; its one AWS permission set is ECS Exec's (the
# SSM port forward that opens the UI), whose ssmmessages actions support no resource-level permissions.
resource "aws_iam_role" "dagster_webserver" {
  name               = "${local.dagster_name}-webserver-${local.region}"
  description        = "Task role of the Dagster webserver: ECS Exec for the UI port forward"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy" "dagster_webserver" {
  name   = "rillet-dagster-webserver"
  role   = aws_iam_role.dagster_webserver.id
  policy = data.aws_iam_policy_document.dagster_webserver.json
}

data "aws_iam_policy_document" "dagster_webserver" {
  statement {
    sid = "EcsExec"
    actions = [
      "ssmmessages:CreateControlChannel",
      "ssmmessages:CreateDataChannel",
      "ssmmessages:OpenControlChannel",
      "ssmmessages:OpenDataChannel",
    ]
    resources = ["*"]
  }

  # Terminating a started run from the UI stops its task.
  statement {
    sid       = "TerminateRuns"
    actions   = ["ecs:DescribeTasks", "ecs:StopTask"]
    resources = ["${replace(aws_ecs_cluster.dagster.arn, ":cluster/", ":task/")}/*"]
  }

  # The run launcher looks its task definition up when the instance loads; DescribeTaskDefinition
  # supports no resource-level permissions.
  statement {
    sid       = "DescribeRunTaskDefinition"
    actions   = ["ecs:DescribeTaskDefinition"]
    resources = ["*"]
  }
}

# What the jobs call, in the daemon (sensors read the indexes; the watermark sensor appends) and in
# the runs: the same controller and segment store calls as the control API function, on the two
# tables and the deployment's objects.
data "aws_iam_policy_document" "dagster_jobs" {
  statement {
    sid = "MetadataTable"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:BatchWriteItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:DeleteItem",
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [
      aws_dynamodb_table.metadata.arn,
      "${aws_dynamodb_table.metadata.arn}/index/*",
    ]
  }

  # ConditionCheckItem: tiering saves a chunk in a transaction that checks the head record's tiering
  # epoch (dataplane/storage_writer.py _tier_run) when the chunk does not move the head's chunk_end.
  # BatchGetItem: the watermark sensor's append to a marks stream in sub-log mode (sublog_shards > 0, or
  # any deployment once a stream chooses sub-logs) reads the writer's state with the lease, and a batch
  # the head with it (dataplane/sublog_path.py), as the append function does.
  statement {
    sid = "SegmentsTable"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:BatchWriteItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:DeleteItem",
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [
      aws_dynamodb_table.segments.arn,
      "${aws_dynamodb_table.segments.arn}/index/*",
    ]
  }

  # Tiering puts chunks; truncation and deletion delete them (DeleteObjects is DeleteObject per key).
  statement {
    sid       = "SegmentObjects"
    actions   = ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.segments.arn}/segments/*"]
  }

  statement {
    sid       = "ListSegmentObjects"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.segments.arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["segments/*"]
    }
  }
}

resource "aws_iam_role" "dagster_daemon" {
  name               = "${local.dagster_name}-daemon-${local.region}"
  description        = "Task role of the Dagster daemon: sensors on the tables, runs launched as ECS tasks"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy" "dagster_daemon_jobs" {
  name   = "rillet-dagster-jobs"
  role   = aws_iam_role.dagster_daemon.id
  policy = data.aws_iam_policy_document.dagster_jobs.json
}

resource "aws_iam_role_policy" "dagster_daemon_launch" {
  name   = "rillet-dagster-launch-runs"
  role   = aws_iam_role.dagster_daemon.id
  policy = data.aws_iam_policy_document.dagster_launch_runs.json
}

# The EcsRunLauncher's calls: RunTask of the run task definition in this cluster (tagged with the run
# id), DescribeTasks and StopTask for run monitoring and termination, and passing the run's roles.
data "aws_iam_policy_document" "dagster_launch_runs" {
  statement {
    sid       = "RunTask"
    actions   = ["ecs:RunTask"]
    resources = ["${aws_ecs_task_definition.run.arn_without_revision}:*"]

    condition {
      test     = "ArnEquals"
      variable = "ecs:cluster"
      values   = [aws_ecs_cluster.dagster.arn]
    }
  }

  statement {
    sid       = "TagRunTasks"
    actions   = ["ecs:TagResource"]
    resources = ["${replace(aws_ecs_cluster.dagster.arn, ":cluster/", ":task/")}/*"]

    condition {
      test     = "StringEquals"
      variable = "ecs:CreateAction"
      values   = ["RunTask"]
    }
  }

  statement {
    sid       = "WatchRunTasks"
    actions   = ["ecs:DescribeTasks", "ecs:StopTask"]
    resources = ["${replace(aws_ecs_cluster.dagster.arn, ":cluster/", ":task/")}/*"]
  }

  # DescribeTaskDefinition supports no resource-level permissions.
  statement {
    sid       = "DescribeRunTaskDefinition"
    actions   = ["ecs:DescribeTaskDefinition"]
    resources = ["*"]
  }

  statement {
    sid       = "PassRunRoles"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.dagster_run.arn, aws_iam_role.dagster_execution.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "dagster_run" {
  name               = "${local.dagster_name}-run-${local.region}"
  description        = "Task role of Dagster runs: the jobs' tables and objects, EMR Serverless job runs"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy" "dagster_run_jobs" {
  name   = "rillet-dagster-jobs"
  role   = aws_iam_role.dagster_run.id
  policy = data.aws_iam_policy_document.dagster_jobs.json
}

resource "aws_iam_role_policy" "dagster_run_emr" {
  name   = "rillet-dagster-emr"
  role   = aws_iam_role.dagster_run.id
  policy = data.aws_iam_policy_document.dagster_submit_emr.json
}

# The export asset submits its Spark job to the EMR Serverless application and waits for it.
data "aws_iam_policy_document" "dagster_submit_emr" {
  statement {
    sid       = "StartJobRun"
    actions   = ["emr-serverless:StartJobRun"]
    resources = [aws_emrserverless_application.spark.arn]
  }

  # After the job, the Pipes client reads the application (its monitoring configuration decides where
  # the driver's logs are).
  statement {
    sid       = "ReadApplication"
    actions   = ["emr-serverless:GetApplication"]
    resources = [aws_emrserverless_application.spark.arn]
  }

  # The Pipes client (dagster_aws/pipes/clients/emr_serverless.py) tags each job run with the Dagster
  # run it belongs to (TagResource at creation), polls it (GetJobRun), logs its Spark UI link as soon
  # as it runs and again when it ends (GetDashboardForJobRun) and cancels it when the Dagster run is
  # terminated (CancelJobRun).
  statement {
    sid = "WatchJobRuns"
    actions = [
      "emr-serverless:CancelJobRun",
      "emr-serverless:GetDashboardForJobRun",
      "emr-serverless:GetJobRun",
      "emr-serverless:TagResource",
    ]
    resources = ["${aws_emrserverless_application.spark.arn}/jobruns/*"]
  }

  statement {
    sid       = "PassJobRole"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.emr_job.arn]

    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["emr-serverless.amazonaws.com"]
    }
  }
}

# -- task definitions and services --------------------------------------------------------------------

resource "aws_ecs_task_definition" "webserver" {
  family                   = "${local.dagster_name}-webserver"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.dagster_cpu
  memory                   = var.dagster_memory
  execution_role_arn       = aws_iam_role.dagster_execution.arn
  task_role_arn            = aws_iam_role.dagster_webserver.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.dagster_architecture
  }

  container_definitions = jsonencode([
    {
      name             = "webserver"
      image            = local.dagster_image
      essential        = true
      command          = ["dagster-webserver", "--host", "0.0.0.0", "--port", "3000", "--workspace", "/opt/dagster/workspace.yaml"]
      portMappings     = [{ containerPort = 3000, protocol = "tcp" }]
      environment      = [for name, value in local.dagster_environment : { name = name, value = value }]
      logConfiguration = local.dagster_log_configuration
    },
  ])
}

# The daemon's task also runs the maintenance jobs' runs as processes of its own (run launcher in the
# instance), hence its own memory size.
resource "aws_ecs_task_definition" "daemon" {
  family                   = "${local.dagster_name}-daemon"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.dagster_cpu
  memory                   = var.dagster_daemon_memory
  execution_role_arn       = aws_iam_role.dagster_execution.arn
  task_role_arn            = aws_iam_role.dagster_daemon.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.dagster_architecture
  }

  container_definitions = jsonencode([
    {
      name             = "daemon"
      image            = local.dagster_image
      essential        = true
      command          = ["dagster-daemon", "run", "--log-format", "json", "--workspace", "/opt/dagster/workspace.yaml"]
      environment      = [for name, value in local.dagster_environment : { name = name, value = value }]
      logConfiguration = local.dagster_log_configuration
    },
  ])
}

# The run launcher starts this with its own command (dagster api execute_run ...) in the "run" container.
resource "aws_ecs_task_definition" "run" {
  family                   = local.dagster_run_family
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.dagster_cpu
  memory                   = var.dagster_memory
  execution_role_arn       = aws_iam_role.dagster_execution.arn
  task_role_arn            = aws_iam_role.dagster_run.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.dagster_architecture
  }

  container_definitions = jsonencode([
    {
      name             = "run"
      image            = local.dagster_image
      essential        = true
      environment      = [for name, value in local.dagster_environment : { name = name, value = value }]
      logConfiguration = local.dagster_log_configuration
    },
  ])
}

resource "aws_ecs_service" "webserver" {
  name                   = "${local.dagster_name}-webserver"
  cluster                = aws_ecs_cluster.dagster.id
  task_definition        = aws_ecs_task_definition.webserver.arn
  desired_count          = 1
  launch_type            = "FARGATE"
  enable_execute_command = true
  wait_for_steady_state  = true # apply fails (after the rollback) when the new tasks do not start

  # A task that cannot start (bad image, crash at start) fails the deployment and rolls back to the
  # last working task definition, instead of crash-looping while apply reports success.
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.dagster_subnet_ids
    security_groups  = var.dagster_security_group_ids
    assign_public_ip = false
  }

  # The task definition names the roles, not their policies: without these a first task could start
  # before its roles may pull the image, write logs or read the database password, and fail.
  depends_on = [
    aws_iam_role_policy.dagster_execution,
    aws_iam_role_policy.dagster_webserver,
    aws_iam_role_policy.dagster_db_password,
  ]
}

# One daemon only: Dagster's daemon must not run twice against one instance.
resource "aws_ecs_service" "daemon" {
  name                               = "${local.dagster_name}-daemon"
  cluster                            = aws_ecs_cluster.dagster.id
  task_definition                    = aws_ecs_task_definition.daemon.arn
  desired_count                      = 1
  launch_type                        = "FARGATE"
  wait_for_steady_state              = true
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.dagster_subnet_ids
    security_groups  = var.dagster_security_group_ids
    assign_public_ip = false
  }

  # As for the webserver: the daemon's sensors need their table grants and its launcher its ECS grants
  # from its first tick.
  depends_on = [
    aws_iam_role_policy.dagster_execution,
    aws_iam_role_policy.dagster_daemon_jobs,
    aws_iam_role_policy.dagster_daemon_launch,
    aws_iam_role_policy.dagster_db_password,
  ]
}
