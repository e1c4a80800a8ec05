"""Watermarks: a sensor that, every 10 seconds, computes each watermarked stream's next watermark.

The work is small (a few reads and at most one append per stream with active writers), so the
sensor does it on its tick instead of launching a run; its tick log in the Dagster UI says which
streams got a new watermark.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from dagster_project.resources import RilletDeployment, sensor_interval


@sensor(minimum_interval_seconds=sensor_interval("watermark", 10), default_status=DefaultSensorStatus.RUNNING,
        description="Appends each stream's watermark (writers' upper-bound cut, lowest and highest noted time).")
def watermark_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    appended = rillet.controller().watermarks.run()
    for stream, watermark in appended:
        context.log.info("%s: watermark [%d, %d]", stream, watermark.lower_ms, watermark.upper_ms)
    return SkipReason(f"appended {len(appended)} watermark(s)" + (
        ": " + ", ".join(stream for stream, _ in appended) if appended else ""))
