#!/bin/sh
# Writes the Dagster instance that Terraform rendered (DAGSTER_INSTANCE_YAML, infra/terraform/dagster.tf)
# into DAGSTER_HOME, then runs the container's command (dagster-webserver, dagster-daemon, or the
# "dagster api execute_run" the ECS run launcher starts).
set -eu
if [ -n "${DAGSTER_INSTANCE_YAML:-}" ]; then
  mkdir -p "$DAGSTER_HOME"
  printf '%s\n' "$DAGSTER_INSTANCE_YAML" > "$DAGSTER_HOME/dagster.yaml"
fi
exec "$@"
