"""Create a deployment's tables and bucket from the models that define them.

The PynamoDB models are the one schema definition: standalone creates the tables from them and a
test checks that infra/terraform declares the same keys and indexes.
"""

from __future__ import annotations

from controlplane import models as control_models
from dataplane import models as data_models
from dataplane.deployment import Deployment

TABLE_MODELS = (control_models.MetadataItem, data_models.SegmentMeta)


def bind_all(deployment: Deployment) -> None:
    control_models.bind(deployment)
    data_models.bind(deployment)


def _binding() -> Deployment:
    meta = data_models.SegmentItem.Meta
    return Deployment(region=meta.region, endpoint_url=getattr(meta, "host", None),
                      metadata_table=control_models.MetadataItem.Meta.table_name,
                      segments_table=meta.table_name)


def create_resources(deployment: Deployment) -> None:
    """Create the tables and the bucket if they do not exist yet (idempotent).

    The models are pointed at ``deployment`` only while the tables are created, so a process that
    works with another deployment (a test session next to a stack it started) keeps its own.
    """
    previous = _binding()
    bind_all(deployment)
    try:
        for model in TABLE_MODELS:
            if not model.exists():
                model.create_table(billing_mode="PAY_PER_REQUEST", wait=True)
                if model is data_models.SegmentMeta:  # its TTL attribute is on another item type
                    model._get_connection().connection.client.update_time_to_live(
                        TableName=model.Meta.table_name,
                        TimeToLiveSpecification={"Enabled": True, "AttributeName": data_models.EXPIRES_AT})
    finally:
        bind_all(previous)
    s3 = deployment.s3
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if deployment.bucket not in existing:
        s3.create_bucket(Bucket=deployment.bucket)
