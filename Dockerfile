# syntax=docker/dockerfile:1
# Two targets:
#   image         the Dagster image of infra/terraform/dagster.tf (webserver, daemon and runs): `make image`
#   emr-package   the archive EMR Serverless jobs run with (rillet, rillet_spark and their dependencies
#                 in a venv-pack archive, passed with spark.archives): `make emr-package`
# Both install versions from requirements.lock, the pins the tests run with (the image only the runtime
# part of it: docker/requirements-runtime.txt).

# The EMR Serverless release of infra/terraform/emr.tf; its base images are named after the release label
# (public.ecr.aws/emr-serverless/spark/<release label>). An ARG used in a FROM must precede the first FROM.
ARG EMR_RELEASE=emr-spark-8.0.0

# -- the Dagster image ------------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm AS image

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DAGSTER_HOME=/opt/dagster/home

WORKDIR /opt/rillet

# The lock's pins cut to what the image runs (infra/runtime_requirements.py writes the file: no pyspark,
# moto, pandas or test tools; Spark runs on EMR). It is a whole closure, so --no-deps installs exactly
# it, nothing resolved anew.
COPY docker/requirements-runtime.txt ./
RUN pip install --no-cache-dir --no-deps -r requirements-runtime.txt

COPY pyproject.toml ./
COPY client ./client
COPY controlplane ./controlplane
COPY dataplane ./dataplane
COPY lambdas ./lambdas
COPY dagster_project ./dagster_project
COPY standalone ./standalone
COPY spark ./spark
RUN pip install --no-cache-dir --no-deps ./client ./spark . \
    && rm -rf build *.egg-info client/build client/*.egg-info spark/build spark/*.egg-info

COPY docker/workspace.yaml /opt/dagster/workspace.yaml
COPY docker/entrypoint.sh /usr/local/bin/rillet-entrypoint

RUN useradd --create-home --uid 10001 dagster \
    && mkdir -p "$DAGSTER_HOME" \
    && chown dagster "$DAGSTER_HOME"
USER dagster

ENTRYPOINT ["/usr/local/bin/rillet-entrypoint"]
CMD ["dagster-webserver", "--host", "0.0.0.0", "--port", "3000", "--workspace", "/opt/dagster/workspace.yaml"]

# -- the EMR Serverless archive ----------------------------------------------------------------------------
# Built on EMR's own image of the application's release (Python 3.11, the glibc the jobs run on), as AWS
# documents for venv-pack archives; EMR_RELEASE (declared at the top) is the release_label of
# infra/terraform/emr.tf. Spark itself (pyspark) comes from EMR, so it is left out.
FROM public.ecr.aws/emr-serverless/spark/${EMR_RELEASE}:latest AS emr-build
USER root
WORKDIR /build
COPY requirements.lock ./
COPY client ./client
COPY spark ./spark
RUN python3 -m venv /build/venv \
    && /build/venv/bin/pip install --no-cache-dir venv-pack==0.2.0 \
    && /build/venv/bin/pip install --no-cache-dir --constraint requirements.lock ./client ./spark \
    && mkdir /out \
    && /build/venv/bin/venv-pack -p /build/venv -o /out/rillet-emr.tar.gz

FROM scratch AS emr-package
COPY --from=emr-build /out/rillet-emr.tar.gz /
