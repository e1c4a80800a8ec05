data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

locals {
  account_id = data.aws_caller_identity.current.account_id
  region     = data.aws_region.current.name

  metadata_table_name = coalesce(var.metadata_table_name, "${var.name_prefix}-metadata")
  segments_table_name = coalesce(var.segments_table_name, "${var.name_prefix}-segments")
  bucket_name         = coalesce(var.bucket_name, "${var.name_prefix}-segments-${local.account_id}-${local.region}")

  # var.lambda_zip relative to this module, not to wherever terraform runs (-chdir, a wrapper module).
  lambda_zip = startswith(var.lambda_zip, "/") ? var.lambda_zip : "${path.module}/${var.lambda_zip}"

  # Function names; each function's log group is /aws/lambda/<name>.
  function_names = {
    controller_api = "${var.name_prefix}-controller-api"
    append         = "${var.name_prefix}-append"
    read           = "${var.name_prefix}-read"
    tails          = "${var.name_prefix}-tails"
  }

  # Their timeouts in seconds (the duration alarms fire at 80 % of them). The tails function makes one
  # BatchGetItem, with botocore's retries.
  function_timeouts = {
    controller_api = 30
    append         = 30
    read           = 30
    tails          = 10
  }
}
