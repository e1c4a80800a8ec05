variable "region" {
  description = "AWS region to deploy to; null takes it from the usual provider sources (AWS_REGION, the profile)."
  type        = string
  default     = null
}

variable "name_prefix" {
  description = "Prefix of every resource name. With the default the tables get the names the code defaults to (dataplane/deployment.py)."
  type        = string
  default     = "rillet"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,29}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 2-31 characters of lower-case letters, digits and hyphens (it is part of the bucket name)."
  }
}

variable "metadata_table_name" {
  description = "Name of the stream metadata table; null means \"<name_prefix>-metadata\"."
  type        = string
  default     = null
}

variable "segments_table_name" {
  description = "Name of the segments table (segment head records and index entries); null means \"<name_prefix>-segments\"."
  type        = string
  default     = null
}

variable "bucket_name" {
  description = "Name of the segment chunk bucket; null means \"<name_prefix>-segments-<account id>-<region>\" (bucket names are global)."
  type        = string
  default     = null
}

variable "table_deletion_protection" {
  description = "Protect both tables from deletion (terraform destroy fails until this is set to false and applied)."
  type        = bool
  default     = true
}

variable "bucket_force_destroy" {
  description = "Let terraform destroy delete the bucket even when it still holds segment objects."
  type        = bool
  default     = false
}

variable "lambda_zip" {
  description = "Path of the Lambda code artifact built by infra/build_lambda.py, relative to this directory."
  type        = string
  default     = "../../build/lambda.zip"
}

variable "lambda_architecture" {
  description = "Instruction set of the three functions; build the zip for the same one (build_lambda.py --arch)."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.lambda_architecture)
    error_message = "lambda_architecture must be arm64 or x86_64."
  }
}

variable "log_retention_days" {
  description = "How long CloudWatch keeps the functions' logs."
  type        = number
  default     = 14
}

variable "log_level" {
  description = "POWERTOOLS_LOG_LEVEL of the three functions."
  type        = string
  default     = "INFO"
}

variable "tags" {
  description = "Tags applied to every resource (provider default_tags)."
  type        = map(string)
  default = {
    Project = "rillet"
  }
}
