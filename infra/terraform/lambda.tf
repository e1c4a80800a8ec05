# The four functions share one code artifact (infra/build_lambda.py) and differ in handler, role,
# memory and environment. Each is reached through a Function URL with AWS_IAM auth: clients sign requests with
# SigV4 (service "lambda") and need the policy in aws_iam_policy.client.
#
# Log groups are declared (not left to Lambda to create) so that they have a retention period; the
# functions depend on them so that no invocation can create one first.

resource "aws_cloudwatch_log_group" "controller_api" {
  #checkov:skip=CKV_AWS_158:the logs carry request metadata, no stream payloads; CloudWatch's own encryption is enough and a CMK costs $1 a month
  #checkov:skip=CKV_AWS_338:retention is the operator's choice (var.log_retention_days); a year of logs of every append would cost more than the data
  name              = "/aws/lambda/${local.function_names.controller_api}"
  retention_in_days = var.log_retention_days
}

resource "aws_cloudwatch_log_group" "append" {
  #checkov:skip=CKV_AWS_158:the logs carry request metadata, no stream payloads; CloudWatch's own encryption is enough and a CMK costs $1 a month
  #checkov:skip=CKV_AWS_338:retention is the operator's choice (var.log_retention_days); a year of logs of every append would cost more than the data
  name              = "/aws/lambda/${local.function_names.append}"
  retention_in_days = var.log_retention_days
}

resource "aws_cloudwatch_log_group" "read" {
  #checkov:skip=CKV_AWS_158:the logs carry request metadata, no stream payloads; CloudWatch's own encryption is enough and a CMK costs $1 a month
  #checkov:skip=CKV_AWS_338:retention is the operator's choice (var.log_retention_days); a year of logs of every append would cost more than the data
  name              = "/aws/lambda/${local.function_names.read}"
  retention_in_days = var.log_retention_days
}

resource "aws_cloudwatch_log_group" "tails" {
  #checkov:skip=CKV_AWS_158:the logs carry request metadata, no stream payloads; CloudWatch's own encryption is enough and a CMK costs $1 a month
  #checkov:skip=CKV_AWS_338:retention is the operator's choice (var.log_retention_days); a year of logs of every append would cost more than the data
  name              = "/aws/lambda/${local.function_names.tails}"
  retention_in_days = var.log_retention_days
}

# Control API: scopes, streams and segment queries as JSON; also tells clients where the data API is.
resource "aws_lambda_function" "controller_api" {
  #checkov:skip=CKV_AWS_116:Function URLs invoke synchronously; a dead-letter queue applies only to asynchronous invocations
  #checkov:skip=CKV_AWS_117:the functions call only the DynamoDB and S3 endpoints; a VPC would add NAT gateway or endpoint costs and cold-start time for no isolation gained
  #checkov:skip=CKV_AWS_272:the zip is built from this repository by the operator who applies it (infra/build_lambda.py); code signing needs an AWS Signer profile, left to deployments that want one
  #checkov:skip=CKV_AWS_173:the variables are table and bucket names and URLs, no secrets; Lambda encrypts them at rest with its AWS managed key
  function_name    = local.function_names.controller_api
  description      = "Rillet control API: scopes, streams and segment queries"
  role             = aws_iam_role.controller_api.arn
  handler          = "lambdas.controller_api.handler.handler"
  runtime          = "python3.11"
  architectures    = [var.lambda_architecture]
  filename         = local.lambda_zip
  source_code_hash = filebase64sha256(local.lambda_zip)
  memory_size      = 512
  timeout          = local.function_timeouts.controller_api

  reserved_concurrent_executions = var.reserved_concurrency.controller_api

  environment {
    variables = {
      RILLET_METADATA_TABLE        = aws_dynamodb_table.metadata.name
      RILLET_SEGMENTS_TABLE        = aws_dynamodb_table.segments.name
      RILLET_BUCKET                = aws_s3_bucket.segments.bucket
      RILLET_APPEND_URL            = aws_lambda_function_url.append.function_url
      RILLET_READ_URL              = aws_lambda_function_url.read.function_url
      RILLET_TAILS_URL             = aws_lambda_function_url.tails.function_url
      RILLET_SUBLOG_SHARDS         = tostring(var.sublog_shards)
      POWERTOOLS_SERVICE_NAME      = "controller"
      POWERTOOLS_METRICS_NAMESPACE = "Rillet"
      POWERTOOLS_LOG_LEVEL         = var.log_level
    }
  }

  tracing_config {
    mode = "Active"
  }

  depends_on = [
    aws_cloudwatch_log_group.controller_api,
    aws_iam_role_policy.controller_api,
  ]
}

# Append API: binary blocks of events, de-duplicated by writer id and event number.
resource "aws_lambda_function" "append" {
  #checkov:skip=CKV_AWS_50:tracing is var.data_path_tracing (PassThrough by default: Active would cost about twice the request fee per request; see tracing_config)
  #checkov:skip=CKV_AWS_116:Function URLs invoke synchronously; a dead-letter queue applies only to asynchronous invocations
  #checkov:skip=CKV_AWS_117:the functions call only the DynamoDB and S3 endpoints; a VPC would add NAT gateway or endpoint costs and cold-start time for no isolation gained
  #checkov:skip=CKV_AWS_272:the zip is built from this repository by the operator who applies it (infra/build_lambda.py); code signing needs an AWS Signer profile, left to deployments that want one
  #checkov:skip=CKV_AWS_173:the variables are table and bucket names and URLs, no secrets; Lambda encrypts them at rest with its AWS managed key
  function_name    = local.function_names.append
  description      = "Rillet append API: binary event blocks into segments"
  role             = aws_iam_role.append.arn
  handler          = "lambdas.append.handler.handler"
  runtime          = "python3.11"
  architectures    = [var.lambda_architecture]
  filename         = local.lambda_zip
  source_code_hash = filebase64sha256(local.lambda_zip)
  memory_size      = 512
  timeout          = local.function_timeouts.append

  reserved_concurrent_executions = var.reserved_concurrency.append

  environment {
    variables = {
      RILLET_METADATA_TABLE        = aws_dynamodb_table.metadata.name
      RILLET_SEGMENTS_TABLE        = aws_dynamodb_table.segments.name
      RILLET_BUCKET                = aws_s3_bucket.segments.bucket
      RILLET_WRITER_EXPIRY_HOURS   = tostring(var.writer_expiry_hours)
      POWERTOOLS_SERVICE_NAME      = "append"
      POWERTOOLS_METRICS_NAMESPACE = "Rillet"
      POWERTOOLS_LOG_LEVEL         = var.log_level
    }
  }

  # Active tracing records 5 % of a busy function's requests at $5 per million: about $4e-7 a request,
  # twice its request fee (bench/cost.py). Traced when the caller asks, or Active by var.data_path_tracing.
  tracing_config {
    mode = var.data_path_tracing
  }

  depends_on = [
    aws_cloudwatch_log_group.append,
    aws_iam_role_policy.append,
  ]
}

# Read API: where a segment's bytes are (presigned S3 GETs, inline bytes), byte ranges and tail checks;
# no request waits for data (a read at the tail answers at once), so the timeout only bounds a slow
# read of up to 4 MiB. Its responses can hold event bytes: the tracer keeps them out of the X-Ray trace.
resource "aws_lambda_function" "read" {
  #checkov:skip=CKV_AWS_50:tracing is var.data_path_tracing (PassThrough by default: Active would cost about twice the request fee per request; see tracing_config)
  #checkov:skip=CKV_AWS_116:Function URLs invoke synchronously; a dead-letter queue applies only to asynchronous invocations
  #checkov:skip=CKV_AWS_117:the functions call only the DynamoDB and S3 endpoints; a VPC would add NAT gateway or endpoint costs and cold-start time for no isolation gained
  #checkov:skip=CKV_AWS_272:the zip is built from this repository by the operator who applies it (infra/build_lambda.py); code signing needs an AWS Signer profile, left to deployments that want one
  #checkov:skip=CKV_AWS_173:the variables are table and bucket names and URLs, no secrets; Lambda encrypts them at rest with its AWS managed key
  function_name    = local.function_names.read
  description      = "Rillet read API: binary byte ranges of segments"
  role             = aws_iam_role.read.arn
  handler          = "lambdas.read.handler.handler"
  runtime          = "python3.11"
  architectures    = [var.lambda_architecture]
  filename         = local.lambda_zip
  source_code_hash = filebase64sha256(local.lambda_zip)
  memory_size      = 512
  timeout          = local.function_timeouts.read

  reserved_concurrent_executions = var.reserved_concurrency.read

  environment {
    variables = {
      RILLET_METADATA_TABLE              = aws_dynamodb_table.metadata.name
      RILLET_SEGMENTS_TABLE              = aws_dynamodb_table.segments.name
      RILLET_BUCKET                      = aws_s3_bucket.segments.bucket
      POWERTOOLS_SERVICE_NAME            = "read"
      POWERTOOLS_METRICS_NAMESPACE       = "Rillet"
      POWERTOOLS_LOG_LEVEL               = var.log_level
      POWERTOOLS_TRACER_CAPTURE_RESPONSE = "false"
    }
  }

  # Active tracing records 5 % of a busy function's requests at $5 per million: about $4e-7 a request,
  # twice its request fee (bench/cost.py). Traced when the caller asks, or Active by var.data_path_tracing.
  tracing_config {
    mode = var.data_path_tracing
  }

  depends_on = [
    aws_cloudwatch_log_group.read,
    aws_iam_role_policy.read,
  ]
}

# Tails API: the tail checks of waiting readers, and nothing else. A reader idle at the tail sends one
# every 1.9 s all day, each a single eventually consistent BatchGetItem; at the read function's 512 MB
# their duration alone would push an idle reader over $0.0125 a day (docs/benchmarks.md, read path).
# The handler imports no S3 client or presigner; its instances peak well under var.tails_memory_mb
# (docs/operations.md), and the tails-memory alarm (monitoring.tf) says when that changes.
resource "aws_lambda_function" "tails" {
  #checkov:skip=CKV_AWS_50:traced when the caller asks (PassThrough): Active tracing would record nearly every check of a lone idle reader at 25 times the check's price (see tracing_config)
  #checkov:skip=CKV_AWS_116:Function URLs invoke synchronously; a dead-letter queue applies only to asynchronous invocations
  #checkov:skip=CKV_AWS_117:the functions call only the DynamoDB and S3 endpoints; a VPC would add NAT gateway or endpoint costs and cold-start time for no isolation gained
  #checkov:skip=CKV_AWS_272:the zip is built from this repository by the operator who applies it (infra/build_lambda.py); code signing needs an AWS Signer profile, left to deployments that want one
  #checkov:skip=CKV_AWS_173:the variables are table and bucket names and URLs, no secrets; Lambda encrypts them at rest with its AWS managed key
  function_name    = local.function_names.tails
  description      = "Rillet tails API: tail checks of waiting readers"
  role             = aws_iam_role.tails.arn
  handler          = "lambdas.tails.handler.handler"
  runtime          = "python3.11"
  architectures    = [var.lambda_architecture]
  filename         = local.lambda_zip
  source_code_hash = filebase64sha256(local.lambda_zip)
  memory_size      = var.tails_memory_mb
  timeout          = local.function_timeouts.tails

  reserved_concurrent_executions = var.reserved_concurrency.tails

  environment {
    variables = {
      RILLET_METADATA_TABLE        = aws_dynamodb_table.metadata.name
      RILLET_SEGMENTS_TABLE        = aws_dynamodb_table.segments.name
      RILLET_BUCKET                = aws_s3_bucket.segments.bucket
      POWERTOOLS_SERVICE_NAME      = "tails"
      POWERTOOLS_METRICS_NAMESPACE = "Rillet"
      POWERTOOLS_LOG_LEVEL         = var.log_level
    }
  }

  # Traced only when the caller asks (a sampled trace header). Active tracing samples one request a
  # second and 5 % of the rest, and a lone idle reader's check every 1.9 s would fall in that first
  # second every time: $5 per million traces, 25 times the check's request fee (bench/cost.py).
  tracing_config {
    mode = "PassThrough"
  }

  # Lambda's own START, END and REPORT lines (about 350 bytes per invocation, at $0.50 per GB
  # ingested) would cost about as much as the check's request fee; system lines below WARN are not
  # sent. The handler logs a warning when an instance's memory runs high (the tails-memory alarm).
  logging_config {
    log_format       = "JSON"
    system_log_level = "WARN"
  }

  depends_on = [
    aws_cloudwatch_log_group.tails,
    aws_iam_role_policy.tails,
  ]
}

resource "aws_lambda_function_url" "controller_api" {
  function_name      = aws_lambda_function.controller_api.function_name
  authorization_type = "AWS_IAM"
  invoke_mode        = "BUFFERED"
}

resource "aws_lambda_function_url" "append" {
  function_name      = aws_lambda_function.append.function_name
  authorization_type = "AWS_IAM"
  invoke_mode        = "BUFFERED"
}

resource "aws_lambda_function_url" "read" {
  function_name      = aws_lambda_function.read.function_name
  authorization_type = "AWS_IAM"
  invoke_mode        = "BUFFERED"
}

resource "aws_lambda_function_url" "tails" {
  function_name      = aws_lambda_function.tails.function_name
  authorization_type = "AWS_IAM"
  invoke_mode        = "BUFFERED"
}
