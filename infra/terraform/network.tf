# Gateway endpoints for S3 and DynamoDB on the private subnets' route tables: free, and they keep the
# image layers ECR serves from S3, the segment chunks and every table call of the Dagster tasks and the
# EMR jobs off the NAT gateway ($0.045 a GB processed). The NAT stays for what has no private route:
# the Function URLs the EMR jobs call (and, unless you add interface endpoints, the ECR, Logs, Secrets
# Manager and ECS APIs). [] creates none, for a VPC that has them already.
resource "aws_vpc_endpoint" "gateway" {
  for_each = length(var.gateway_endpoint_route_table_ids) > 0 ? toset(["s3", "dynamodb"]) : toset([])

  vpc_id            = data.aws_subnet.dagster.vpc_id
  service_name      = "com.amazonaws.${local.region}.${each.key}"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = var.gateway_endpoint_route_table_ids
}
