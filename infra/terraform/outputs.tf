output "controller_api_url" {
  description = "Function URL of the control API: the endpoint to give the SDK and the rillet CLI."
  value       = aws_lambda_function_url.controller_api.function_url
}

output "append_url" {
  description = "Function URL of the append API (clients learn it from the control API's /v1/endpoints)."
  value       = aws_lambda_function_url.append.function_url
}

output "read_url" {
  description = "Function URL of the read API (clients learn it from the control API's /v1/endpoints)."
  value       = aws_lambda_function_url.read.function_url
}

output "metadata_table_name" {
  description = "Stream metadata table (RILLET_METADATA_TABLE)."
  value       = aws_dynamodb_table.metadata.name
}

output "segments_table_name" {
  description = "Segments table (RILLET_SEGMENTS_TABLE)."
  value       = aws_dynamodb_table.segments.name
}

output "bucket_name" {
  description = "Segment chunk bucket (RILLET_BUCKET)."
  value       = aws_s3_bucket.segments.bucket
}

output "client_policy_arn" {
  description = "IAM policy that lets a user or role call the three Function URLs."
  value       = aws_iam_policy.client.arn
}
