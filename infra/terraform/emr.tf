# Spark on EMR Serverless: an application on emr-spark-8.0.0 (Spark 4.0.2, Python 3.11), which starts
# when a job is submitted and stops after idle_timeout_minutes, so it costs nothing between jobs. Jobs
# run as aws_iam_role.emr_job and use the archive `make emr-package` builds (the rillet and
# rillet_spark packages with their dependencies, passed with spark.archives), uploaded with the job
# script under local.emr_artifacts_uri.

locals {
  emr_artifacts_uri      = "s3://${var.emr_output_bucket}/${trimsuffix(var.emr_artifacts_prefix, "/")}"
  emr_subnet_ids         = coalesce(var.emr_subnet_ids, var.dagster_subnet_ids)
  emr_security_group_ids = coalesce(var.emr_security_group_ids, var.dagster_security_group_ids)
}

resource "aws_emrserverless_application" "spark" {
  name          = "${var.name_prefix}-spark"
  release_label = "emr-spark-8.0.0"
  type          = "SPARK"
  architecture  = var.emr_architecture

  maximum_capacity {
    cpu    = "${var.emr_max_vcpu} vCPU"
    memory = "${var.emr_max_vcpu * 4} GB"
  }

  auto_start_configuration {
    enabled = true
  }

  auto_stop_configuration {
    enabled              = true
    idle_timeout_minutes = 15
  }

  # Without a VPC, a job reaches only a fixed list of AWS endpoints, and Function URLs (which have no
  # private endpoint) are not among them: the export job could not plan or read inline bytes. In the
  # VPC its workers reach the URLs through the subnets' NAT gateway and S3 through the gateway endpoint.
  network_configuration {
    subnet_ids         = local.emr_subnet_ids
    security_group_ids = local.emr_security_group_ids
  }
}

data "aws_iam_policy_document" "emr_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "emr_job" {
  name               = "${var.name_prefix}-emr-job-${local.region}"
  description        = "Execution role of Rillet Spark jobs on EMR Serverless"
  assume_role_policy = data.aws_iam_policy_document.emr_assume.json
}

resource "aws_iam_role_policy" "emr_job" {
  name   = "rillet-emr-job"
  role   = aws_iam_role.emr_job.id
  policy = data.aws_iam_policy_document.emr_job.json
}

data "aws_s3_bucket" "emr_output" {
  bucket = var.emr_output_bucket
}

# A Spark read plans through the control API, reads inline bytes through the read API and tiered
# chunks straight from the segments bucket (spark/rillet_spark/datasource.py); it writes Parquet to the
# output bucket, where the job script and the archive are kept as well.
data "aws_iam_policy_document" "emr_job" {
  statement {
    sid       = "ReadSegmentObjects"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.segments.arn}/segments/*"]
  }

  # Not for listing: without s3:ListBucket S3 answers a GET of a missing (truncated) chunk with 403
  # instead of 404, and the data source turns only NoSuchKey into Truncated; Spark would fail instead.
  # Limited to the deployment's prefix.
  statement {
    sid       = "MissingObjectsAreNotFound"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.segments.arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["segments/*"]
    }
  }

  statement {
    sid     = "CallControlAndReadApis"
    actions = ["lambda:InvokeFunctionUrl"]
    resources = [
      aws_lambda_function.controller_api.arn,
      aws_lambda_function.read.arn,
    ]

    condition {
      test     = "StringEquals"
      variable = "lambda:FunctionUrlAuthType"
      values   = ["AWS_IAM"]
    }
  }

  statement {
    sid     = "InvokeThroughFunctionUrls"
    actions = ["lambda:InvokeFunction"]
    resources = [
      aws_lambda_function.controller_api.arn,
      aws_lambda_function.read.arn,
    ]

    condition {
      test     = "Bool"
      variable = "lambda:InvokedViaFunctionUrl"
      values   = ["true"]
    }
  }

  statement {
    sid       = "OutputObjects"
    actions   = ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    resources = ["${data.aws_s3_bucket.emr_output.arn}/*"]
  }

  statement {
    sid       = "ListOutput"
    actions   = ["s3:ListBucket"]
    resources = [data.aws_s3_bucket.emr_output.arn]
  }
}
