"""The deployment modes the call-by-call IAM tests (test_function_calls.py, test_job_calls.py) run in.

A Terraform variable that reaches the code's environment can change which AWS calls the code makes:
with ``sublog_shards`` above 0 the streams that leave the choice, the watermark sensor's marks streams
among them, append through the sub-log path (dataplane/sublog_path.py: BatchGetItem, transactions of
its own), which the default mode never calls, and an IAM review of the default mode alone missed that
(issue 53). So the tests run in each mode of MODES, with the environment Terraform gives the functions
and the Dagster tasks in it (``environment``). A stream may also choose sub-logs for itself on a
deployment whose default is the chain (StreamConfiguration.sublog_shards), so in that mode the tests
have streams that choose it (STREAM_SUBLOGS) besides those that leave it. Every variable the code's
environment is set from is a mode's here or is in CALLS_UNCHANGED with the reason
(test_job_calls.test_every_variable_the_code_reads_is_reviewed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from test_terraform import Terraform, _environment, function

VARIABLE_REF = re.compile(r"(?<![\w.])var\.([A-Za-z_][A-Za-z0-9_]*)")
LOCAL_REF = re.compile(r"(?<![\w.])local\.([A-Za-z_][A-Za-z0-9_]*)")
# A value that is one variable as it is, or as a string (tostring): the environment the tests can set.
PLAIN_VARIABLE = re.compile(r"^\$\{(?:tostring\()?var\.([A-Za-z_][A-Za-z0-9_]*)\)?\}$")


@dataclass(frozen=True)
class Mode:
    name: str
    variables: dict[str, Any] = field(default_factory=dict)  # Terraform variables set apart from their defaults

    def value(self, tf: Terraform, variable: str) -> Any:
        return self.variables.get(variable, tf.variables[variable].get("default"))


MODES = [Mode("sublog_shards=0"), Mode("sublog_shards=2", {"sublog_shards": 2})]
# What the tests' streams that choose sub-logs for themselves (StreamConfiguration.sublog_shards) choose,
# on a deployment whose default is the chain.
STREAM_SUBLOGS = 2

# Reach the code's environment but change no call it makes, only the values it works with.
CALLS_UNCHANGED = {
    "log_level": "how much the functions log (POWERTOOLS_LOG_LEVEL)",
    "writer_expiry_hours": "when a forgotten writer's old resend is refused, and the writer states' TTL value",
    "emr_output_bucket": "where the export's Spark job script, archive and output are (test_dagster_emr.py)",
    "emr_artifacts_prefix": "where the export's Spark job script and archive are (test_dagster_emr.py)",
    "dagster_max_concurrent_runs": "how many runs the daemon's queue lets start at once",
    "dagster_subnet_ids": "the network of the runs' tasks (the run launcher's RunTask)",
    "dagster_security_group_ids": "the network of the runs' tasks (the run launcher's RunTask)",
    "name_prefix": "the names of the resources the code is told",
}


def variables_reaching(tf: Terraform, value: Any) -> set[str]:
    """The Terraform variables an expression depends on, through locals too."""
    text, seen, found = str(value), set(), set()
    while True:
        found |= set(VARIABLE_REF.findall(text))
        new = set(LOCAL_REF.findall(text)) - seen
        if not new:
            return found
        seen |= new
        text = " ".join(str(tf.locals[name]) for name in new if name in tf.locals)


def code_environments(tf: Terraform, handlers: list[str]) -> dict[str, dict[str, Any]]:
    """The environment Terraform sets, by who gets it: each function by handler, and "dagster" (every
    Dagster task: the daemon, whose sensors and maintenance runs call AWS, and the export runs)."""
    environments = {"dagster": tf.locals["dagster_environment"]}
    for handler in handlers:
        name, fn = function(tf, handler)
        environments[handler] = _environment(name, fn)
    return environments


def environment(tf: Terraform, settings: dict[str, Any], mode: Mode) -> dict[str, str]:
    """The variables of ``settings`` (a Terraform environment) whose values are Terraform variables, as
    ``mode`` sets them: what the tests set for the code under test (tables and bucket are their own)."""
    values = {}
    for name, value in settings.items():
        plain = PLAIN_VARIABLE.match(str(value))
        if plain:
            variable = plain.group(1)
            values[name] = str(mode.value(tf, variable))
    return values
