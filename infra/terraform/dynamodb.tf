# The two tables, on demand. Their keys and indexes are the PynamoDB models' (controlplane/models.py
# MetadataItem, dataplane/models.py SegmentItem and SegmentMeta); tests/infra/test_terraform.py fails
# when the two drift apart. Only key attributes are declared here: DynamoDB is schemaless otherwise.

# Stream metadata: scopes, streams, epochs, segment records, transactions and reader groups, versioned
# by conditional writes. The sparse "workflows" index lists the records with a workflow in flight, for
# the sweeper; the sparse "txn-deadlines" index lists open transactions by expiry, for the timeout job;
# the sparse "retention" index lists streams with a retention policy by bucket, for the retention job;
# the sparse "autoscale" and "watermarks" indexes list the streams the auto-scaling and watermark
# sensors look at.
# Finished transactions expire through the table's TTL attribute.
resource "aws_dynamodb_table" "metadata" {
  #checkov:skip=CKV_AWS_119:encrypted at rest with the AWS managed key; a customer managed key adds KMS charges and key administration, and IAM on the table already decides who reads
  name                        = local.metadata_table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  range_key                   = "sk"
  deletion_protection_enabled = var.table_deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  attribute {
    name = "pending"
    type = "S"
  }

  attribute {
    name = "pending_since"
    type = "N"
  }

  attribute {
    name = "deadline_shard"
    type = "S"
  }

  attribute {
    name = "deadline_ms"
    type = "N"
  }

  attribute {
    name = "retention_bucket"
    type = "N"
  }

  attribute {
    name = "autoscale"
    type = "S"
  }

  attribute {
    name = "watermarked"
    type = "S"
  }

  global_secondary_index {
    name               = "workflows"
    hash_key           = "pending"
    range_key          = "pending_since"
    projection_type    = "INCLUDE"
    non_key_attributes = ["kind", "scope", "stream", "txn_id", "group"]
  }

  global_secondary_index {
    name               = "txn-deadlines"
    hash_key           = "deadline_shard"
    range_key          = "deadline_ms"
    projection_type    = "INCLUDE"
    non_key_attributes = ["kind", "scope", "stream", "txn_id", "group"]
  }

  global_secondary_index {
    name               = "retention"
    hash_key           = "retention_bucket"
    range_key          = "sk"
    projection_type    = "INCLUDE"
    non_key_attributes = ["kind", "scope", "stream", "txn_id", "group"]
  }

  global_secondary_index {
    name               = "autoscale"
    hash_key           = "autoscale"
    range_key          = "sk"
    projection_type    = "INCLUDE"
    non_key_attributes = ["kind", "scope", "stream", "txn_id", "group"]
  }

  global_secondary_index {
    name               = "watermarks"
    hash_key           = "watermarked"
    range_key          = "sk"
    projection_type    = "INCLUDE"
    non_key_attributes = ["kind", "scope", "stream", "txn_id", "group"]
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}

# Segments: one partition per segment, holding its head record ("m") and its index entries ("e#...").
# The sparse "tiering" index (attributes "ts"/"ta", the short attr_names of tier_shard/tier_at) lists
# the segments whose inline bytes are due to move to S3, under write-sharded keys "due#<n>"; it projects
# only the discriminator "k", so an append that leaves "ts"/"ta" alone writes nothing to it. The sparse
# "scale-candidates" index ("ss"/"sa": scale_shard/scale_at, keys "sc#<n>") lists the segments of
# auto-scaled streams the auto-scaling sensor is due to look at, marked by the append path when a rate
# crosses a threshold (dataplane/scale_signals.py); it projects only "k" too.
resource "aws_dynamodb_table" "segments" {
  #checkov:skip=CKV_AWS_119:encrypted at rest with the AWS managed key; a customer managed key adds KMS charges and key administration, and IAM on the table already decides who reads
  name                        = local.segments_table_name
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  range_key                   = "sk"
  deletion_protection_enabled = var.table_deletion_protection

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  attribute {
    name = "ts"
    type = "S"
  }

  attribute {
    name = "ta"
    type = "N"
  }

  attribute {
    name = "ss"
    type = "S"
  }

  attribute {
    name = "sa"
    type = "N"
  }

  global_secondary_index {
    name               = "tiering"
    hash_key           = "ts"
    range_key          = "ta"
    projection_type    = "INCLUDE"
    non_key_attributes = ["k"]
  }

  global_secondary_index {
    name               = "scale-candidates"
    hash_key           = "ss"
    range_key          = "sa"
    projection_type    = "INCLUDE"
    non_key_attributes = ["k"]
  }

  # Writer state items of writers idle longer than the writer expiry window (dataplane/models.py).
  ttl {
    attribute_name = "ex"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }
}
