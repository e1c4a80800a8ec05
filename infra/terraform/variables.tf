variable "region" {
  description = "AWS region to deploy to; null takes it from the usual provider sources (AWS_REGION, the profile)."
  type        = string
  default     = null
}

variable "name_prefix" {
  description = "Prefix of every resource name. With the default the tables get the names the code defaults to (dataplane/deployment.py). At most 26 characters: the default bucket name <prefix>-segments-<account>-<region> must stay within S3's 63 with the longest region names (14 characters)."
  type        = string
  default     = "rillet"

  # The strictest naming rules among the resources it prefixes: the RDS instance and its final snapshot
  # (a letter first, no "--", no hyphen last), the bucket (lower case; no "sthree-" or "amzn-s3-demo-"
  # at the start, and "xn--" falls to the "--" rule), the ECR repository (lower case), and the bucket
  # name's length. Checked at plan, not after ~80 resources exist.
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,24}[a-z0-9]$", var.name_prefix)) && !strcontains(var.name_prefix, "--") && !startswith(var.name_prefix, "sthree-") && !startswith(var.name_prefix, "amzn-s3-demo-")
    error_message = "name_prefix must be 2-26 characters of lower-case letters, digits and hyphens, start with a letter, end with a letter or digit, hold no \"--\" (RDS identifiers) and not start with \"sthree-\" or \"amzn-s3-demo-\" (S3); the bucket name <prefix>-segments-<12-digit account>-<region> has at most 63."
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

  validation {
    condition     = var.bucket_name == null ? true : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be 3-63 lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit."
  }
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
  description = "Path of the Lambda code artifact built by infra/build_lambda.py: absolute, or relative to this directory (the module), wherever terraform runs from."
  type        = string
  default     = "../../build/lambda.zip"
}

variable "lambda_architecture" {
  description = "Instruction set of the four functions; build the zip for the same one (build_lambda.py --arch)."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.lambda_architecture)
    error_message = "lambda_architecture must be arm64 or x86_64."
  }
}

variable "tails_memory_mb" {
  description = "Memory of the tails function (tail checks only). 128 MB is what keeps an idle reader at about $0.012 a day; raise it if the tails-memory alarm fires (docs/operations.md)."
  type        = number
  default     = 128

  validation {
    condition     = var.tails_memory_mb >= 128 && var.tails_memory_mb <= 10240 && floor(var.tails_memory_mb) == var.tails_memory_mb
    error_message = "tails_memory_mb is a whole number of MB from 128 to 10240 (Lambda's range)."
  }
}

variable "log_retention_days" {
  description = "How long CloudWatch keeps the functions' logs."
  type        = number
  default     = 14

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be one of CloudWatch Logs' retention periods (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)."
  }
}

variable "writer_expiry_hours" {
  description = "How long a writer id may be idle before a segment may forget it (its de-duplication state expires); a resend older than this from a forgotten id is refused with WriterExpired."
  type        = number
  default     = 168

  validation {
    condition     = var.writer_expiry_hours >= 1 && floor(var.writer_expiry_hours) == var.writer_expiry_hours
    error_message = "writer_expiry_hours must be a whole number of hours, at least 1."
  }
}

variable "sublog_shards" {
  description = "Sub-log mode for the segments of streams created from now on that do not choose their own (StreamConfiguration.sublog_shards; docs/dataplane.md, \"Sub-logs\"): the shards each segment's appends spread over, so that a hundred writers at once commit a thousand appends a second to one segment, in batches. 0 keeps the chain, which costs a lone writer 3 requests an append where sub-logs cost about 7 plus the shards. The controller and the Dagster jobs create segments, so both get it."
  type        = number
  default     = 0

  validation {
    condition     = var.sublog_shards >= 0 && var.sublog_shards <= 64 && floor(var.sublog_shards) == var.sublog_shards
    error_message = "sublog_shards must be a whole number from 0 to 64."
  }
}

variable "data_path_tracing" {
  description = "X-Ray tracing of the append and read functions: PassThrough (traced when the caller sends a sampled trace header) or Active (Lambda samples 1 request a second and 5 % of the rest, at $5 per million traces: about twice a request's fee at volume)."
  type        = string
  default     = "PassThrough"

  validation {
    condition     = contains(["Active", "PassThrough"], var.data_path_tracing)
    error_message = "data_path_tracing must be Active or PassThrough."
  }
}

variable "log_level" {
  description = "POWERTOOLS_LOG_LEVEL of the four functions."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL."
  }
}

variable "tags" {
  description = "Tags applied to every resource (provider default_tags)."
  type        = map(string)
  default = {
    Project = "rillet"
  }
}

variable "reserved_concurrency" {
  description = "Reserved concurrency of each function (the most instances it may run at once, so a runaway client cannot scale the bill without limit); null leaves it unreserved. Unreserved by default: AWS keeps 100 of the account's concurrency unreserved, and new accounts often have a limit of 10, so any reservation fails there until a quota increase (docs/operations.md, Quotas)."
  type = object({
    controller_api = optional(number)
    append         = optional(number)
    read           = optional(number)
    tails          = optional(number)
  })
  default = {}

  validation {
    condition     = alltrue([for n in values(var.reserved_concurrency) : n == null ? true : n >= 1 && floor(n) == n])
    error_message = "Each reserved_concurrency is null (unreserved) or a whole number of at least 1 (0 would stop the function)."
  }
}

variable "image_tag" {
  description = "Tag (or sha256: digest) of the Rillet image in the ECR repository. Required: the repository's tags are immutable, so each build is pushed under a new tag (a git commit, a version) and \"latest\" is refused."
  type        = string

  validation {
    condition     = var.image_tag != "latest" && (can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image_tag)) || can(regex("^sha256:[0-9a-f]{64}$", var.image_tag)))
    error_message = "image_tag must be an ECR tag (letters, digits, _ . -, at most 128, not \"latest\") or a sha256:<64 hex> digest."
  }
}

variable "dagster_subnet_ids" {
  description = "Private subnets (two or more AZs, for the database) of the Dagster tasks and database. They need a route to the AWS APIs (NAT gateway or VPC endpoints for ECR, Logs, Secrets Manager, ECS, DynamoDB and S3)."
  type        = list(string)

  validation {
    condition     = length(var.dagster_subnet_ids) >= 2
    error_message = "dagster_subnet_ids needs subnets in at least two availability zones (an RDS subnet group needs two)."
  }
}

variable "dagster_security_group_ids" {
  description = "Security groups of the Dagster tasks; they need outbound HTTPS, and the database admits PostgreSQL from them."
  type        = list(string)

  validation {
    condition     = length(var.dagster_security_group_ids) >= 1 && length(var.dagster_security_group_ids) <= 5
    error_message = "dagster_security_group_ids needs 1 to 5 security groups (ECS allows 5 per task)."
  }
}

variable "dagster_cpu" {
  description = "Fargate CPU units of each Dagster task (webserver, daemon, export run)."
  type        = number
  default     = 512

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096], var.dagster_cpu)
    error_message = "dagster_cpu must be a Fargate CPU size: 256, 512, 1024, 2048 or 4096."
  }
}

variable "dagster_memory" {
  description = "Fargate memory (MiB) of the webserver's and the export runs' tasks (the daemon's: dagster_daemon_memory)."
  type        = number
  default     = 1024

  validation {
    condition     = var.dagster_memory >= 512 && var.dagster_memory <= 30720 && var.dagster_memory % 512 == 0
    error_message = "dagster_memory must be a Fargate memory size in MiB (a multiple of 512 up to 30720) that the CPU size allows."
  }
}

variable "dagster_daemon_memory" {
  description = "Fargate memory (MiB) of the daemon's task, which also runs the maintenance jobs' runs (a Python process each, up to dagster_max_concurrent_runs at once); 2 GB for 0.5 vCPU adds about $2.60 a month over 1 GB."
  type        = number
  default     = 2048

  validation {
    condition     = var.dagster_daemon_memory >= 1024 && var.dagster_daemon_memory <= 30720 && var.dagster_daemon_memory % 1024 == 0
    error_message = "dagster_daemon_memory must be a Fargate memory size in MiB, a multiple of 1024 (what dagster_cpu allows)."
  }
}

variable "dagster_architecture" {
  description = "CPU architecture of the Dagster tasks (ARM64 is 20 % cheaper on Fargate); build the image for it."
  type        = string
  default     = "ARM64"

  validation {
    condition     = contains(["ARM64", "X86_64"], var.dagster_architecture)
    error_message = "dagster_architecture must be ARM64 or X86_64."
  }
}

variable "dagster_db_instance_class" {
  description = "RDS instance class of Dagster's PostgreSQL database."
  type        = string
  default     = "db.t4g.micro"

  validation {
    condition     = can(regex("^db\\.[a-z0-9]+\\.[a-z0-9]+$", var.dagster_db_instance_class))
    error_message = "dagster_db_instance_class must be an RDS instance class such as db.t4g.micro."
  }
}

variable "dagster_max_concurrent_runs" {
  description = "How many Dagster runs (Fargate tasks) may run at once; the rest wait in the queue."
  type        = number
  default     = 4

  validation {
    condition     = var.dagster_max_concurrent_runs >= 1 && floor(var.dagster_max_concurrent_runs) == var.dagster_max_concurrent_runs
    error_message = "dagster_max_concurrent_runs must be a whole number of at least 1."
  }
}

variable "emr_output_bucket" {
  description = "Existing bucket that Spark jobs write to; it also holds the job script and archive under emr_artifacts_prefix."
  type        = string
}

variable "emr_artifacts_prefix" {
  description = "Key prefix in emr_output_bucket of the job script and the archive make emr-package builds."
  type        = string
  default     = "rillet/emr"
}

variable "emr_architecture" {
  description = "Architecture of the EMR Serverless application; build the archive for it (make emr-package)."
  type        = string
  default     = "X86_64"

  validation {
    condition     = contains(["ARM64", "X86_64"], var.emr_architecture)
    error_message = "emr_architecture must be ARM64 or X86_64."
  }
}

variable "emr_max_vcpu" {
  description = "Most vCPUs the EMR Serverless application may use at once (4 GB of memory each): the cap on a job's cost."
  type        = number
  default     = 32

  validation {
    condition     = var.emr_max_vcpu >= 1 && floor(var.emr_max_vcpu) == var.emr_max_vcpu
    error_message = "emr_max_vcpu must be a whole number of vCPUs, at least 1."
  }
}

variable "emr_subnet_ids" {
  description = "Private subnets of the EMR Serverless jobs; null means dagster_subnet_ids. They need a NAT gateway route: the jobs call the control and read Function URLs, which have no VPC endpoint (an S3 gateway endpoint keeps chunk reads off the NAT)."
  type        = list(string)
  default     = null

  validation {
    condition     = var.emr_subnet_ids == null ? true : length(var.emr_subnet_ids) >= 1
    error_message = "emr_subnet_ids needs at least one subnet (or null for dagster_subnet_ids)."
  }
}

variable "emr_security_group_ids" {
  description = "Security groups of the EMR Serverless jobs (outbound HTTPS to the Function URLs and S3); null means dagster_security_group_ids."
  type        = list(string)
  default     = null
}

variable "gateway_endpoint_route_table_ids" {
  description = "Route tables of the private subnets, for free S3 and DynamoDB gateway endpoints (image layers, chunks and table calls then skip the NAT gateway's $0.045 a GB); [] creates none (the VPC has them already)."
  type        = list(string)
  default     = []
}

variable "alarm_emails" {
  description = "E-mail addresses subscribed to the alarm topic (each confirms by e-mail); [] for none (subscribe something else to the alarm_topic_arn output)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.alarm_emails : can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", e))])
    error_message = "alarm_emails must be e-mail addresses."
  }
}

variable "monthly_budget_usd" {
  description = "A monthly cost budget for the account in USD, alarming on the topic at 80 % forecast and 100 % actual; null for none."
  type        = number
  default     = null

  validation {
    condition     = var.monthly_budget_usd == null ? true : var.monthly_budget_usd > 0
    error_message = "monthly_budget_usd must be positive (or null)."
  }
}

variable "dagster_db_max_storage_gb" {
  description = "Upper bound of the Dagster database's storage autoscaling (it starts at 20 GB and grows when under 10 % is free)."
  type        = number
  default     = 100

  validation {
    condition     = var.dagster_db_max_storage_gb >= 21
    error_message = "dagster_db_max_storage_gb must exceed the allocated 20 GB."
  }
}

variable "ecr_images_kept" {
  description = "How many of the newest images the ECR repository keeps (its lifecycle policy expires older ones); keep more than the builds you might roll back to."
  type        = number
  default     = 20

  validation {
    condition     = var.ecr_images_kept >= 2 && floor(var.ecr_images_kept) == var.ecr_images_kept
    error_message = "ecr_images_kept must be a whole number of at least 2 (the deployed image and one to roll back to)."
  }
}

variable "stream_metrics" {
  description = "Streams (\"scope/stream\") whose consumption-based retention figures CloudWatch keeps per stream and per subscriber, besides the deployment-wide worst values; each listed stream costs 3 custom metrics and 2 more per subscriber, $0.30 a month each (docs/operations.md). At most 10."
  type        = list(string)
  default     = []

  # At most 10 streams: the cost cap, and the filter pattern that lists them stays within CloudWatch
  # Logs' 1,024 characters.
  validation {
    condition     = length(var.stream_metrics) <= 10 && alltrue([for s in var.stream_metrics : can(regex("^[A-Za-z0-9.-]+/[A-Za-z0-9.-]+$", s))]) && length(join(" || ", [for s in var.stream_metrics : "$.stream = \"${s}\""])) <= 900
    error_message = "stream_metrics lists at most 10 \"scope/stream\" names (letters, digits, . and -), at most 900 characters of filter between them."
  }
}
