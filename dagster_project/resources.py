"""The deployment the jobs work on, injected into ops and sensors by type."""


import hashlib
import os
from dataclasses import replace
from functools import lru_cache

from dagster import ConfigurableResource

from controlplane.service import Controller
from dataplane.deployment import Deployment
from dataplane.segment_store import StoreSettings


class RilletDeployment(ConfigurableResource):
    """Tables, bucket and endpoint of one Rillet deployment (moto in standalone, AWS otherwise)."""

    region: str = Deployment.region
    endpoint_url: str | None = None
    metadata_table: str = Deployment.metadata_table
    segments_table: str = Deployment.segments_table
    bucket: str = Deployment.bucket
    controller_url: str = "http://127.0.0.1:9090"  # the control API, for jobs that go through the SDK (Spark)
    chunk_target_bytes: int = StoreSettings.chunk_target
    tier_min_age_ms: int = StoreSettings.tier_min_age_ms
    # Set on AWS (infra/terraform/dagster.tf): the export asset then submits its Spark job to this EMR
    # Serverless application, as this role, with the job script and archive under the artifacts URI;
    # unset (standalone), it runs Spark in the run's own process.
    emr_application_id: str | None = None
    emr_job_role_arn: str | None = None
    emr_artifacts_uri: str | None = None

    @classmethod
    def from_env(cls) -> "RilletDeployment":
        d = Deployment.from_env()
        return cls(region=d.region, endpoint_url=d.endpoint_url, metadata_table=d.metadata_table,
                   segments_table=d.segments_table, bucket=d.bucket,
                   controller_url=os.environ.get("RILLET_CONTROLLER_URL", cls.model_fields["controller_url"].default),
                   emr_application_id=os.environ.get("RILLET_EMR_APPLICATION_ID") or None,
                   emr_job_role_arn=os.environ.get("RILLET_EMR_JOB_ROLE_ARN") or None,
                   emr_artifacts_uri=os.environ.get("RILLET_EMR_ARTIFACTS_URI") or None)

    def deployment(self) -> Deployment:
        return Deployment(region=self.region, endpoint_url=self.endpoint_url, metadata_table=self.metadata_table,
                          segments_table=self.segments_table, bucket=self.bucket)

    def controller(self) -> Controller:
        """This process's controller of the deployment: built once (its AWS clients with it), not on every
        sensor tick; the models are pointed at the deployment again, as a test may have pointed them at
        another since."""
        settings = replace(StoreSettings.from_env(), chunk_target=self.chunk_target_bytes,
                           tier_min_age_ms=self.tier_min_age_ms)
        controller = _controller(self.deployment(), settings, _settings_environment())
        controller.bind()
        return controller


def _settings_environment() -> tuple[tuple[str, str], ...]:
    """The RILLET_* variables the controller's parts read their settings from when built."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("RILLET_")))


@lru_cache(maxsize=8)  # a deployment's process talks to one deployment; tests to a few at a time
def _controller(deployment: Deployment, settings: StoreSettings, environment: tuple[tuple[str, str], ...]) -> Controller:
    return Controller.for_deployment(deployment, settings)


def work_key(prefix: str, parts: list[str]) -> str:
    """A run key naming a piece of work: the same work seen on two sensor ticks starts one run."""
    digest = hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:16]
    return f"{prefix}-{digest}"


def sensor_interval(name: str, default_s: int) -> int:
    """A sensor's interval, overridable per deployment (standalone runs them more often)."""
    return int(os.environ.get(f"RILLET_{name.upper()}_INTERVAL_S", default_s))
