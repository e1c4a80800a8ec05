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

output "tails_url" {
  description = "Function URL of the tails API, where readers send tail checks (clients learn it from /v1/endpoints)."
  value       = aws_lambda_function_url.tails.function_url
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
  description = "IAM policy that lets a user or role call the four Function URLs."
  value       = aws_iam_policy.client.arn
}

output "ecr_repository_url" {
  description = "Where to push the image (make image, then docker push <url>:<image_tag>)."
  value       = aws_ecr_repository.rillet.repository_url
}

output "dagster_cluster" {
  description = "ECS cluster of the Dagster webserver, daemon and runs."
  value       = aws_ecs_cluster.dagster.name
}

output "dagster_ui_access" {
  description = "How to open the private Dagster UI: an SSM port forward to the webserver task (needs the Session Manager plugin)."
  value       = <<-EOT
    TASK=$(aws ecs list-tasks --cluster ${aws_ecs_cluster.dagster.name} --service-name ${aws_ecs_service.webserver.name} --query 'taskArns[0]' --output text | awk -F/ '{print $NF}')
    RUNTIME=$(aws ecs describe-tasks --cluster ${aws_ecs_cluster.dagster.name} --tasks $TASK --query 'tasks[0].containers[0].runtimeId' --output text)
    aws ssm start-session --target ecs:${aws_ecs_cluster.dagster.name}_$${TASK}_$${RUNTIME} --document-name AWS-StartPortForwardingSession --parameters portNumber=3000,localPortNumber=3000
    # then open http://localhost:3000
  EOT
}

output "dagster_db_secret_arn" {
  description = "Secrets Manager secret (managed by RDS) holding the Dagster database password."
  value       = aws_db_instance.dagster.master_user_secret[0].secret_arn
}

output "emr_application_id" {
  description = "EMR Serverless application of Rillet's Spark jobs."
  value       = aws_emrserverless_application.spark.id
}

output "emr_job_role_arn" {
  description = "Execution role to pass to EMR Serverless job runs."
  value       = aws_iam_role.emr_job.arn
}

output "emr_artifacts_uri" {
  description = "Where to upload the job script and archive that make emr-package builds."
  value       = local.emr_artifacts_uri
}

output "alarm_topic_arn" {
  description = "SNS topic every alarm publishes to (subscribe a pager, chat hook or queue besides alarm_emails)."
  value       = aws_sns_topic.alarms.arn
}
