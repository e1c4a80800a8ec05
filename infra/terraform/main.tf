data "aws_caller_identity" "current" {}

data "aws_region" "current" {}

locals {
  account_id = data.aws_caller_identity.current.account_id
  region     = data.aws_region.current.name

  metadata_table_name = coalesce(var.metadata_table_name, "${var.name_prefix}-metadata")
  segments_table_name = coalesce(var.segments_table_name, "${var.name_prefix}-segments")
  bucket_name         = coalesce(var.bucket_name, "${var.name_prefix}-segments-${local.account_id}-${local.region}")

  # Function names; each function's log group is /aws/lambda/<name>.
  function_names = {
    controller_api = "${var.name_prefix}-controller-api"
    append         = "${var.name_prefix}-append"
    read           = "${var.name_prefix}-read"
  }
}
