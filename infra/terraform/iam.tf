# One role per function, each allowed only the calls its code makes (see README.md for the list and
# where in the code each call is made). DynamoDB's TransactWriteItems and S3's DeleteObjects have no
# IAM action of their own: they are authorized per item (ConditionCheckItem, PutItem, ...) and per key
# (DeleteObject). Only X-Ray's actions, which support no resource-level permissions, get "*".

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

# IAM is global: the region in the role names lets one account hold a deployment per region.

resource "aws_iam_role" "controller_api" {
  name               = "${local.function_names.controller_api}-${local.region}"
  description        = "Execution role of the Rillet control API function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

resource "aws_iam_role" "append" {
  name               = "${local.function_names.append}-${local.region}"
  description        = "Execution role of the Rillet append API function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

resource "aws_iam_role" "read" {
  name               = "${local.function_names.read}-${local.region}"
  description        = "Execution role of the Rillet read API function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

resource "aws_iam_role" "tails" {
  name               = "${local.function_names.tails}-${local.region}"
  description        = "Execution role of the Rillet tails API function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

resource "aws_iam_role_policy" "controller_api" {
  name   = "rillet-controller-api"
  role   = aws_iam_role.controller_api.id
  policy = data.aws_iam_policy_document.controller_api.json
}

resource "aws_iam_role_policy" "append" {
  name   = "rillet-append"
  role   = aws_iam_role.append.id
  policy = data.aws_iam_policy_document.append.json
}

resource "aws_iam_role_policy" "read" {
  name   = "rillet-read"
  role   = aws_iam_role.read.id
  policy = data.aws_iam_policy_document.read.json
}

resource "aws_iam_role_policy" "tails" {
  name   = "rillet-tails"
  role   = aws_iam_role.tails.id
  policy = data.aws_iam_policy_document.tails.json
}

# The controller runs the scope and stream workflows (controlplane/streams.py, store.py): conditional
# writes, a TransactWriteItems (ConditionCheck + Put) in create_stream, batch reads and writes of
# segment records, and, through the segment store, creating, sealing, truncating and deleting segments
# with their objects.
data "aws_iam_policy_document" "controller_api" {
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

  statement {
    sid = "SegmentsTable"
    actions = [
      "dynamodb:BatchWriteItem",
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

  statement {
    sid       = "SegmentObjects"
    actions   = ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.segments.arn}/segments/*"]
  }

  # Deleting a segment lists its objects (ListObjectsV2 under segments/<segment>/).
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

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.controller_api.arn}:*"]
  }

  statement {
    sid       = "XRay"
    actions   = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]
    resources = ["*"]
  }
}

# An append (dataplane/append_path.py append/_place): read the head record, claim the tail with a
# conditional put, advance the head record with a conditional update, release a bad claim with a
# conditional delete; a block above the inline size is first put to S3, and that object is deleted
# again when the block is refused (a sealed segment, a conflict) or another request placed it first.
data "aws_iam_policy_document" "append" {
  # BatchGetItem: a sub-log appender reads its writer's state and the segment's lease at once, a batcher
  # the head with the lease, and the writers' states its blocks carry no copy of (dataplane/sublog_path.py);
  # its TransactWriteItems is authorized as the PutItem and UpdateItem actions it holds.
  statement {
    sid = "SegmentsTable"
    actions = [
      "dynamodb:BatchGetItem",
      "dynamodb:DeleteItem",
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:Query",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.segments.arn]
  }

  # DeleteObject only for the request's own block object: without it a refused append answers 500
  # instead of its typed error (409 SegmentSealed), and the SDK retries instead of following the seal.
  statement {
    sid       = "PutSegmentObjects"
    actions   = ["s3:DeleteObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.segments.arn}/segments/*"]
  }

  # Authorization (controlplane/grants.py): the deployment's grant count and the caller's grants, read
  # only, and only those items (by their partition keys); only the controller writes grants.
  statement {
    sid       = "ReadGrants"
    actions   = ["dynamodb:GetItem", "dynamodb:Query"]
    resources = [aws_dynamodb_table.metadata.arn]

    condition {
      test     = "ForAllValues:StringLike"
      variable = "dynamodb:LeadingKeys"
      values   = ["grants", "grant#*"]
    }
  }

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.append.arn}:*"]
  }

  statement {
    sid       = "XRay"
    actions   = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]
    resources = ["*"]
  }
}

# A read (dataplane/read_index.py read/locations/tails): the head record, a query of the index entries,
# ranged GETs of the objects they point to (and presigned GETs of them, which act with this role's
# s3:GetObject), and one eventually consistent BatchGetItem of head records per tail check.
data "aws_iam_policy_document" "read" {
  statement {
    sid       = "SegmentsTable"
    actions   = ["dynamodb:BatchGetItem", "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query"]
    resources = [aws_dynamodb_table.segments.arn]
  }

  statement {
    sid       = "GetSegmentObjects"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.segments.arn}/segments/*"]
  }

  # Authorization (controlplane/grants.py): the deployment's grant count and the caller's grants, read
  # only, and only those items (by their partition keys); only the controller writes grants.
  statement {
    sid       = "ReadGrants"
    actions   = ["dynamodb:GetItem", "dynamodb:Query"]
    resources = [aws_dynamodb_table.metadata.arn]

    condition {
      test     = "ForAllValues:StringLike"
      variable = "dynamodb:LeadingKeys"
      values   = ["grants", "grant#*"]
    }
  }

  # Not for listing: without s3:ListBucket, S3 answers a GET of a missing key with 403 AccessDenied
  # instead of 404 NoSuchKey, and the read path turns NoSuchKey into Truncated (an object released by
  # a concurrent truncation) -- it would become a 500 instead. Limited to the deployment's prefix, so
  # the role cannot list anything else the bucket holds.
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
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.read.arn}:*"]
  }

  statement {
    sid       = "XRay"
    actions   = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]
    resources = ["*"]
  }
}

# A tail check (dataplane/read_index.py tails): one eventually consistent BatchGetItem of head records,
# after the same grant reads as every function's authorization. No S3 access at all.
data "aws_iam_policy_document" "tails" {
  statement {
    sid       = "SegmentsTable"
    actions   = ["dynamodb:BatchGetItem"]
    resources = [aws_dynamodb_table.segments.arn]
  }

  # Authorization (controlplane/grants.py): the deployment's grant count and the caller's grants, read
  # only, and only those items (by their partition keys); only the controller writes grants.
  statement {
    sid       = "ReadGrants"
    actions   = ["dynamodb:GetItem", "dynamodb:Query"]
    resources = [aws_dynamodb_table.metadata.arn]

    condition {
      test     = "ForAllValues:StringLike"
      variable = "dynamodb:LeadingKeys"
      values   = ["grants", "grant#*"]
    }
  }

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.tails.arn}:*"]
  }

  statement {
    sid       = "XRay"
    actions   = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"]
    resources = ["*"]
  }
}

# What a client (the SDK, the CLI, Spark readers) needs to call the four Function URLs; attach it to
# the users or roles that use Rillet. Since October 2025 a Function URL call needs
# lambda:InvokeFunction as well as lambda:InvokeFunctionUrl; the conditions keep both to URL calls.
data "aws_iam_policy_document" "client" {
  statement {
    sid     = "InvokeFunctionUrls"
    actions = ["lambda:InvokeFunctionUrl"]
    resources = [
      aws_lambda_function.controller_api.arn,
      aws_lambda_function.append.arn,
      aws_lambda_function.read.arn,
      aws_lambda_function.tails.arn,
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
      aws_lambda_function.append.arn,
      aws_lambda_function.read.arn,
      aws_lambda_function.tails.arn,
    ]

    condition {
      test     = "Bool"
      variable = "lambda:InvokedViaFunctionUrl"
      values   = ["true"]
    }
  }
}

resource "aws_iam_policy" "client" {
  name        = "${var.name_prefix}-client-${local.region}"
  description = "Call the Rillet control, append, read and tails APIs (Function URLs with AWS_IAM auth)"
  policy      = data.aws_iam_policy_document.client.json
}
