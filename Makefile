# The two commands a newcomer needs: `make up` (standalone stack) and `make test` (whole suite).
# Both create the virtualenv from requirements.lock on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lock bench clean openapi

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==0.13.9

$(STAMP): $(BIN)/uv requirements.lock pyproject.toml client/pyproject.toml spark/pyproject.toml
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock -e ./client -e ./spark -e '.[dev]'
	touch $(STAMP)

# `make up ARGS="--controller-port 9190"` passes options to `rillet standalone` (its --help lists them).
# Ctrl-C is how it stops (exit 130): success for make, so no "Error 130" line. bash, not sh: dash
# dies of the SIGINT itself before it can look at the exit code, and make then reports "Interrupt".
up: SHELL := /bin/bash
up: $(STAMP)
	$(BIN)/rillet standalone $(ARGS) || [ $$? -eq 130 ]

# checkov pins its own boto3/botocore far below ours, so it gets a venv of its own (as pipx would give
# it); its version is pinned here, and tests/infra runs it over infra/terraform.
CHECKOV_VERSION := 3.3.30
CHECKOV := .venv-checkov/bin/checkov

$(CHECKOV): $(BIN)/uv
	$(PYTHON) -m venv .venv-checkov
	$(BIN)/uv pip install --quiet --python .venv-checkov/bin/python checkov==$(CHECKOV_VERSION)

# EMR's Spark line (emr-spark-8.0.0 ships Spark 4.0.2): the Spark tests run again on it, from pyspark
# installed into a folder of its own that goes before the venv's (newer) pyspark on PYTHONPATH.
EMR_PYSPARK := pyspark==4.0.5 py4j==0.10.9.9
EMR_SPARK := .spark-4.0

$(EMR_SPARK)/.installed: $(BIN)/uv Makefile
	rm -rf $(EMR_SPARK)
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --target $(EMR_SPARK) $(EMR_PYSPARK)
	touch $@

# Two pytest workers, a file per worker at a time: each has its own moto server, so both cores work
# (one moto answers one request at a time, in the test process). A worker that dies ends the run at
# once, naming its test: pytest-xdist 3.8's replacement of a dead worker under loadfile can wait for
# ever. Then the Spark tests on EMR's Spark.
test: $(STAMP) $(CHECKOV) $(EMR_SPARK)/.installed
	RILLET_CHECKOV=$(CHECKOV) $(BIN)/pytest -n 2 --dist loadfile --max-worker-restart 0
	PYTHONPATH=$(CURDIR)/$(EMR_SPARK) RILLET_SPARK_VERSION=4.0. $(BIN)/pytest tests/spark -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python -m bench

# Re-pin every dependency (run after changing requirements.in or a pyproject's dependencies);
# it needs only uv, so it works while the old pins conflict with the new constraints.
lock: $(BIN)/uv
	$(BIN)/uv pip compile requirements.in --python $(BIN)/python -o requirements.lock \
		--no-emit-package rillet --no-emit-package rillet-spark --no-emit-package rillet-server

clean:
	rm -rf $(VENV) .venv-checkov $(EMR_SPARK) build .pytest_cache .hypothesis

# Regenerate the checked-in OpenAPI documents from the handlers.
openapi: $(STAMP)
	$(BIN)/python -m lambdas.openapi

# The Dagster image of infra/terraform/dagster.tf, and the archive of EMR Serverless jobs (Dockerfile).
# Both need a container engine (docker with buildx). Push the image to the ecr_repository_url output;
# upload build/emr/* to the emr_artifacts_uri output.
.PHONY: image emr-package
IMAGE ?= rillet:latest
IMAGE_PLATFORM ?= linux/arm64
EMR_PLATFORM ?= linux/amd64
EMR_ARTIFACTS_URI ?= $(shell terraform -chdir=infra/terraform output -raw emr_artifacts_uri 2>/dev/null || echo 's3://<emr_output_bucket>/rillet/emr')

image:
	docker build --platform $(IMAGE_PLATFORM) --target image -t $(IMAGE) .

emr-package: $(STAMP)
	docker build --platform $(EMR_PLATFORM) --target emr-package --output type=local,dest=build/emr .
	cp spark/jobs/export_to_parquet.py build/emr/
	@echo "upload:  aws s3 cp --recursive build/emr $(EMR_ARTIFACTS_URI)"
	@echo "entryPoint: $(EMR_ARTIFACTS_URI)/export_to_parquet.py"
	@echo "sparkSubmitParameters: $$($(BIN)/python -c 'import sys; from dagster_project.exports import emr_spark_submit_parameters as p; print(p(sys.argv[1]))' '$(EMR_ARTIFACTS_URI)')"
