# Segment chunks: large append blocks (segments/<segment>/b/...) and tiered chunks
# (segments/<segment>/c/...), written once and deleted explicitly: by truncation and stream deletion,
# by an append that refuses its own block, and by the tiering pass that sweeps a sealed segment's
# unreferenced objects older than the segment store's orphan grace period (10 minutes).
resource "aws_s3_bucket" "segments" {
  #checkov:skip=CKV_AWS_18:access logs would add a log object per append and read, costing more than the data; CloudTrail S3 data events are the option for audits
  #checkov:skip=CKV_AWS_21:segment objects are written once and deleted explicitly by truncation; versions would keep truncated bytes billed
  #checkov:skip=CKV_AWS_144:replication doubles the storage bill; a deployment is one region, like its tables
  #checkov:skip=CKV_AWS_145:SSE-S3 encrypts every object; SSE-KMS would add a KMS request to every chunk GET and PUT
  #checkov:skip=CKV2_AWS_61:no lifecycle rule: objects leave only by truncation or stream deletion, an expiry rule would delete acknowledged data
  #checkov:skip=CKV2_AWS_62:nothing consumes bucket events; readers learn of new bytes from the segments table
  bucket        = local.bucket_name
  force_destroy = var.bucket_force_destroy
}

resource "aws_s3_bucket_ownership_controls" "segments" {
  bucket = aws_s3_bucket.segments.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "segments" {
  bucket = aws_s3_bucket.segments.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "segments" {
  bucket = aws_s3_bucket.segments.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

# No versioning: segment objects never change, and a deleted (truncated) object must stop costing
# storage at once instead of lingering as a noncurrent version.
resource "aws_s3_bucket_versioning" "segments" {
  bucket = aws_s3_bucket.segments.id

  versioning_configuration {
    status = "Disabled"
  }
}

# Refuse plain-HTTP requests.
data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.segments.arn,
      "${aws_s3_bucket.segments.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "segments" {
  bucket = aws_s3_bucket.segments.id
  policy = data.aws_iam_policy_document.bucket.json

  depends_on = [aws_s3_bucket_public_access_block.segments]
}
