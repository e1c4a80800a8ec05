"""A sensor tick reuses the process's AWS clients: the code server evaluates a sensor every 10–30 s, and a
botocore client costs a session and a service-model load (0.1–0.8 s of CPU), which at standalone's
intervals was most of an idle stack's Dagster CPU (docs/benchmarks.md, the idle stack)."""

import pytest
from dagster import build_sensor_context

from dagster_project.definitions import defs

_SENSORS = [s for s in defs.sensors if s.name != "run_failure_reporter"]  # that one reads Dagster's runs only


@pytest.mark.usefixtures("fast_botocore_sessions")
def test_a_second_tick_of_every_sensor_builds_no_aws_client(isolated, count_aws_clients):
    _, resource = isolated
    for sensor in _SENSORS:  # the first ticks build what the process keeps
        with build_sensor_context(resources={"rillet": resource}) as context:
            sensor(context)
    built = count_aws_clients()
    for sensor in _SENSORS:
        with build_sensor_context(resources={"rillet": resource}) as context:
            sensor(context)
    assert {s.name for s in _SENSORS} >= {"autoscale_sensor", "watermark_sensor", "tiering_sensor"}
    assert built == []
