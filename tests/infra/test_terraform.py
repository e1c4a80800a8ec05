"""Keep infra/terraform true to the code.

``terraform init/validate/plan`` need the AWS provider, which the development machines cannot
download (they reach package registries only), and CI may have no terraform binary at all. So these
tests parse the HCL with python-hcl2 and check what matters most:

* the DynamoDB tables have exactly the keys and indexes of the PynamoDB models, derived from the
  models at test time (``Model._get_schema()``, the schema PynamoDB itself would create the table
  with), so changing a model without changing the Terraform fails here;
* every function's handler exists, and the code artifact (infra/build_lambda.py) holds every package
  the handlers import;
* every function has an AWS_IAM Function URL, a log group with a retention period, a role of its own
  with exactly the permissions reviewed below, and the environment the code reads;
* no IAM statement allows a wildcard action, or a "*" resource except for the few actions AWS authorizes
  on nothing else (UNSCOPED_ACTIONS: X-Ray, ECS Exec channels, the ECR login, DescribeTaskDefinition);
* the files are formatted as ``terraform fmt`` would format them (indentation, aligned ``=``, no tabs
  or trailing whitespace); where a terraform binary is installed, ``terraform fmt -check`` runs too.
"""

from __future__ import annotations

import ast
import copy
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
import pytest
from packaging.requirements import Requirement
from pynamodb.constants import ATTR_NAME, ATTR_TYPE, KEY_TYPE, NON_KEY_ATTRIBUTES, PROJECTION_TYPE
from pynamodb.models import Model

from controlplane.models import MetadataItem
from dataplane.deployment import Deployment
from dataplane.models import SegmentMeta
from standalone.resources import TABLE_MODELS as STANDALONE_TABLE_MODELS

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"
BUILD_SCRIPT = ROOT / "infra" / "build_lambda.py"

# Terraform table resource -> the model whose schema it must have, and the Deployment field that names
# it. These are the models standalone creates its tables from, so standalone and AWS share one schema.
TABLES = {
    "metadata": (MetadataItem, "metadata_table"),
    "segments": (SegmentMeta, "segments_table"),
}

CONTROLLER = "lambdas.controller_api.handler.handler"
APPEND = "lambdas.append.handler.handler"
READ = "lambdas.read.handler.handler"
TAILS = "lambdas.tails.handler.handler"
FUNCTIONS = [CONTROLLER, APPEND, READ, TAILS]

# Environment every function needs: variable -> the resource its value must come from. Deployment.from_env
# falls back to defaults when these are unset, which would silently point at the wrong table or bucket.
COMMON_ENV = {
    "RILLET_METADATA_TABLE": ("aws_dynamodb_table", "metadata"),
    "RILLET_SEGMENTS_TABLE": ("aws_dynamodb_table", "segments"),
    "RILLET_BUCKET": ("aws_s3_bucket", "segments"),
}
# The controller tells clients where the data API is (GET /v1/endpoints): variable -> whose URL.
CONTROLLER_URL_ENV = {"RILLET_APPEND_URL": APPEND, "RILLET_READ_URL": READ, "RILLET_TAILS_URL": TAILS}
# Set only in standalone: on AWS it would send every request to a moto server that is not there.
FORBIDDEN_ENV = {"RILLET_AWS_ENDPOINT"}

# The permissions of each function, by what they apply to, as reviewed against the calls the code makes
# (dataplane/segment_store.py, controlplane/store.py, controlplane/streams.py). A change to the IAM
# policies must be a deliberate change here too.
#   metadata/segments: the table; *-index: its indexes; objects: segments/* in the bucket;
#   bucket: the bucket itself; logs: the function's own log group; any: "*" (X-Ray only).
XRAY = {"xray:PutTelemetryRecords", "xray:PutTraceSegments"}
LOGS = {"logs:CreateLogStream", "logs:PutLogEvents"}
_CONTROLLER_METADATA = {
    "dynamodb:BatchGetItem",  # get_segments
    "dynamodb:BatchWriteItem",  # delete_stream_partition, a table's entries on delete
    "dynamodb:ConditionCheckItem",  # create_stream's TransactWriteItems (ConditionCheck on the scope)
    "dynamodb:DeleteItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",  # also create_stream's transactional Put
    "dynamodb:Query",
    "dynamodb:UpdateItem",
}
_CONTROLLER_SEGMENTS = {
    "dynamodb:BatchWriteItem",
    "dynamodb:DeleteItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
}
# The append, read and tails functions authorize requests: they read the grant items of the metadata table
# (partition keys "grants" and "grant#<principal>", controlplane/grant_models.py) and nothing else there.
GRANT_READS = {"dynamodb:GetItem", "dynamodb:Query"}
GRANT_PARTITIONS = ["grants", "grant#*"]
EXPECTED_GRANTS = {
    CONTROLLER: {
        "metadata": _CONTROLLER_METADATA,
        "metadata-index": _CONTROLLER_METADATA,
        "segments": _CONTROLLER_SEGMENTS,
        "segments-index": _CONTROLLER_SEGMENTS,
        # DeleteObject also covers DeleteObjects (SegmentStore._delete_objects).
        "objects": {"s3:DeleteObject", "s3:GetObject", "s3:PutObject"},
        "bucket": {"s3:ListBucket"},  # ListObjectsV2 when a segment is deleted
        "logs": LOGS,
        "any": XRAY,
    },
    APPEND: {
        # BatchGetItem: a sub-log appender reads its writer's state with the lease, a batch the head with
        # it (dataplane/sublog_path.py).
        "segments": {"dynamodb:BatchGetItem", "dynamodb:DeleteItem", "dynamodb:DescribeTable", "dynamodb:GetItem",
                     "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem"},
        # Blocks above the inline size; a refused or duplicate block's own object is deleted again.
        "objects": {"s3:DeleteObject", "s3:PutObject"},
        "metadata": GRANT_READS,
        "logs": LOGS,
        "any": XRAY,
    },
    READ: {
        # BatchGetItem: the tail check of many segments (dataplane/read_index.py tails)
        "segments": {"dynamodb:BatchGetItem", "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query"},
        "objects": {"s3:GetObject"},
        "metadata": GRANT_READS,
        # Limited to segments/*: S3 may then answer a GET of a missing (truncated) key with 403
        # AccessDenied rather than 404; the read path re-reads the head record on either and answers
        # Truncated when the range was truncated, so both are handled.
        "bucket": {"s3:ListBucket"},
        "logs": LOGS,
        "any": XRAY,
    },
    TAILS: {
        # The tail check alone: one BatchGetItem of head records; no S3 at all.
        "segments": {"dynamodb:BatchGetItem"},
        "metadata": GRANT_READS,
        "logs": LOGS,
        "any": XRAY,
    },
}

RESOURCE_REF = re.compile(r"(?<![\w.])(aws_[a-z0-9_]+)\.([A-Za-z_][A-Za-z0-9_-]*)")
DATA_REF = re.compile(r"(?<![\w.])data\.(aws_[a-z0-9_]+)\.([A-Za-z_][A-Za-z0-9_-]*)")
LOCAL_REF = re.compile(r"(?<![\w.])local\.([A-Za-z_][A-Za-z0-9_]*)")


# -- parsing -----------------------------------------------------------------------------------------


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1]
    return text


def _normalize(value: Any) -> Any:
    """python-hcl2 output without its markers, and string literals without their quotes.

    Version 8 keeps the quotes of string literals ('"pk"') and of block labels, wraps expressions as
    "${...}" and marks blocks with "__is_block__"; older versions did neither. After this both look the
    same: literals are plain strings, expressions are "${...}" strings.
    """
    if isinstance(value, dict):
        return {_unquote(k): _normalize(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, str):
        return _unquote(value)
    return value


@dataclass
class Terraform:
    resources: dict[str, dict[str, dict]] = field(default_factory=dict)  # type -> name -> body
    data: dict[str, dict[str, dict]] = field(default_factory=dict)
    variables: dict[str, dict] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    settings: list[dict] = field(default_factory=list)  # terraform {} blocks

    def of_type(self, rtype: str) -> dict[str, dict]:
        return self.resources.get(rtype, {})


def _labelled(doc: dict, kind: str, into: dict[str, dict[str, dict]], where: str) -> None:
    for entry in doc.get(kind, []):
        for rtype, named in entry.items():
            for name, body in named.items():
                assert name not in into.setdefault(rtype, {}), (
                    f"{where}: {kind} {rtype}.{name} is declared twice")
                into[rtype][name] = body


def parse_terraform(directory: Path) -> Terraform:
    tf = Terraform()
    files = sorted(directory.glob("*.tf"))
    assert files, f"no .tf files in {directory}"
    for path in files:
        with path.open() as fh:
            try:
                doc = _normalize(hcl2.load(fh))
            except Exception as e:  # noqa: BLE001 - any parse failure is a test failure with the file name
                pytest.fail(f"{path.name} does not parse as HCL: {e}")
        _labelled(doc, "resource", tf.resources, path.name)
        _labelled(doc, "data", tf.data, path.name)
        for kind, into in (("variable", tf.variables), ("output", tf.outputs)):
            for entry in doc.get(kind, []):
                for name, body in entry.items():
                    assert name not in into, f"{path.name}: {kind} {name} is declared twice"
                    into[name] = body
        for entry in doc.get("locals", []):
            for name, value in entry.items():
                assert name not in tf.locals, f"{path.name}: local {name} is declared twice"
                tf.locals[name] = value
        tf.settings.extend(doc.get("terraform", []))
    return tf


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return parse_terraform(TF_DIR)


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("build_lambda", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(body: dict, name: str) -> list[dict]:
    value = body.get(name, [])
    return [value] if isinstance(value, dict) else list(value)


def one_block(body: dict, name: str, where: str) -> dict:
    found = blocks(body, name)
    assert len(found) == 1, f"{where}: expected one {name} block, found {len(found)}"
    return found[0]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def refs(value: Any) -> set[tuple[str, str]]:
    """The managed resources an expression refers to, as (type, name)."""
    return set(RESOURCE_REF.findall(_text(value)))


def data_refs(value: Any) -> set[tuple[str, str]]:
    return set(DATA_REF.findall(_text(value)))


def functions(tf: Terraform) -> dict[str, tuple[str, dict]]:
    """Lambda functions by handler: handler -> (resource name, body)."""
    by_handler = {}
    for name, fn in tf.of_type("aws_lambda_function").items():
        handler = fn.get("handler")
        assert isinstance(handler, str) and handler, f"aws_lambda_function.{name} has no literal handler"
        assert handler not in by_handler, f"two functions have handler {handler}"
        by_handler[handler] = (name, fn)
    return by_handler


def function(tf: Terraform, handler: str) -> tuple[str, dict]:
    found = functions(tf)
    assert handler in found, f"no aws_lambda_function has handler {handler} (found {sorted(found)})"
    return found[handler]


def function_url(tf: Terraform, fn_name: str) -> tuple[str, dict]:
    urls = [(n, u) for n, u in tf.of_type("aws_lambda_function_url").items()
            if ("aws_lambda_function", fn_name) in refs(u.get("function_name"))]
    assert len(urls) == 1, (
        f"aws_lambda_function.{fn_name} should have exactly one aws_lambda_function_url, has {len(urls)}")
    return urls[0]


def role_of(tf: Terraform, fn_name: str, fn: dict) -> str:
    roles = [name for rtype, name in refs(fn.get("role")) if rtype == "aws_iam_role"]
    where = f"aws_lambda_function.{fn_name}"
    assert len(roles) == 1, f"{where}: role must refer to one aws_iam_role, got {fn.get('role')!r}"
    assert roles[0] in tf.of_type("aws_iam_role"), f"{where}: no aws_iam_role.{roles[0]}"
    return roles[0]


def role_policy_documents(tf: Terraform, role: str) -> list[tuple[str, dict]]:
    """The aws_iam_policy_document data sources attached inline to a role."""
    documents = []
    for name, policy in tf.of_type("aws_iam_role_policy").items():
        roles = refs(policy.get("role"))
        if "each." in _text(policy.get("role")):  # one policy for several roles: they are its for_each
            roles |= refs(policy.get("for_each"))
        if ("aws_iam_role", role) not in roles:
            continue
        used = [n for t, n in data_refs(policy.get("policy")) if t == "aws_iam_policy_document"]
        assert len(used) == 1, (
            f"aws_iam_role_policy.{name}: policy must be data.aws_iam_policy_document.<name>.json "
            f"so that these tests can read it, got {policy.get('policy')!r}")
        assert used[0] in tf.data.get("aws_iam_policy_document", {}), (
            f"no data.aws_iam_policy_document.{used[0]}")
        documents.append((used[0], tf.data["aws_iam_policy_document"][used[0]]))
    return documents


def statements(document: dict) -> list[dict]:
    return blocks(document, "statement")


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


# -- DynamoDB ----------------------------------------------------------------------------------------


def _key(key_schema: list[dict], key_type: str) -> str | None:
    names = [k[ATTR_NAME] for k in key_schema if k[KEY_TYPE] == key_type]
    return names[0] if names else None


def _model_index(index: dict) -> dict:
    projection = index["projection"]
    return {
        "hash_key": _key(index["key_schema"], "HASH"),
        "range_key": _key(index["key_schema"], "RANGE"),
        "projection_type": projection[PROJECTION_TYPE],
        "non_key_attributes": sorted(projection.get(NON_KEY_ATTRIBUTES) or []),
    }


def model_schema(model: type[Model]) -> dict:
    """The table a model describes, from PynamoDB's own schema (the one create_table would use).

    ``_get_schema`` covers the model's hash and range keys (by attr_name, the names stored in DynamoDB)
    and the indexes of every class sharing the table through the discriminator.
    """
    schema = model._get_schema()
    return {
        "billing_mode": getattr(model.Meta, "billing_mode", None),
        "hash_key": _key(schema["key_schema"], "HASH"),
        "range_key": _key(schema["key_schema"], "RANGE"),
        "attributes": {a[ATTR_NAME]: a[ATTR_TYPE] for a in schema["attribute_definitions"]},
        "global_secondary_indexes": {
            i["index_name"]: _model_index(i) for i in schema["global_secondary_indexes"]},
        "local_secondary_indexes": {
            i["index_name"]: _model_index(i) for i in schema["local_secondary_indexes"]},
    }


def terraform_schema(table: dict) -> dict:
    def index(block: dict, hash_key: str | None) -> dict:
        return {
            "hash_key": hash_key,
            "range_key": block.get("range_key"),
            "projection_type": block.get("projection_type"),
            "non_key_attributes": sorted(as_list(block.get("non_key_attributes"))),
        }

    return {
        "billing_mode": table.get("billing_mode", "PROVISIONED"),
        "hash_key": table.get("hash_key"),
        "range_key": table.get("range_key"),
        "attributes": [(a.get("name"), a.get("type")) for a in blocks(table, "attribute")],
        "global_secondary_indexes": [(g.get("name"), index(g, g.get("hash_key")))
                                     for g in blocks(table, "global_secondary_index")],
        # A local index shares the table's hash key.
        "local_secondary_indexes": [(i.get("name"), index(i, table.get("hash_key")))
                                    for i in blocks(table, "local_secondary_index")],
    }


def schema_problems(table: dict, model: type[Model], where: str) -> list[str]:
    """How the Terraform table differs from the model's table (empty when they agree)."""
    want, have = model_schema(model), terraform_schema(table)
    model_name = model.__name__
    problems = []
    if have["billing_mode"] != want["billing_mode"]:
        problems.append(f"{where}: billing_mode is {have['billing_mode']!r}, "
                        f"{model_name} says {want['billing_mode']!r}")
    for key in ("hash_key", "range_key"):
        if have[key] != want[key]:
            problems.append(f"{where}: {key} is {have[key]!r} but {model_name}'s is {want[key]!r}")

    declared: dict[str, str] = {}
    for name, type_ in have["attributes"]:
        if name in declared:
            problems.append(f"{where}: attribute {name!r} is declared twice")
        declared[name] = type_
    for name, type_ in sorted(declared.items()):
        if name not in want["attributes"]:
            problems.append(f"{where}: attribute {name!r} is declared but is not a key of "
                            f"{model_name}'s table or of any of its indexes (declare key attributes only)")
        elif type_ != want["attributes"][name]:
            problems.append(f"{where}: attribute {name!r} has type {type_!r}, {model_name} stores it as "
                            f"{want['attributes'][name]!r}")
    for name, type_ in sorted(want["attributes"].items()):
        if name not in declared:
            problems.append(f"{where}: key attribute {name!r} ({type_}) of {model_name} is not declared")

    tf_keys = {have["hash_key"], have["range_key"]}
    for kind in ("global_secondary_indexes", "local_secondary_indexes"):
        indexes: dict[str, dict] = {}
        for name, spec in have[kind]:
            if name in indexes:
                problems.append(f"{where}: index {name!r} is declared twice")
            indexes[name] = spec
            tf_keys |= {spec["hash_key"], spec["range_key"]}
        for name in sorted(set(indexes) - set(want[kind])):
            problems.append(f"{where}: index {name!r} is not an index of {model_name}")
        for name in sorted(set(want[kind]) - set(indexes)):
            problems.append(f"{where}: {model_name}'s index {name!r} ({want[kind][name]}) is missing")
        for name in sorted(set(indexes) & set(want[kind])):
            for part, expected in want[kind][name].items():
                if indexes[name][part] != expected:
                    problems.append(f"{where}: index {name!r} has {part} {indexes[name][part]!r}, "
                                    f"{model_name}'s has {expected!r}")
    for name in sorted(set(declared) - tf_keys):
        problems.append(f"{where}: attribute {name!r} is not a key of the table or of its indexes in "
                        "Terraform (terraform would reject the table)")
    return problems


def test_every_table_model_has_a_terraform_table(tf):
    models = {model for model, _ in TABLES.values()}
    assert models == set(STANDALONE_TABLE_MODELS), (
        "standalone/resources.py creates tables from "
        f"{sorted(m.__name__ for m in STANDALONE_TABLE_MODELS)}; "
        "map each to its aws_dynamodb_table in TABLES here")
    declared = set(tf.of_type("aws_dynamodb_table"))
    assert declared == set(TABLES), (
        f"Terraform declares tables {sorted(declared)}, the models need {sorted(TABLES)}")


@pytest.mark.parametrize("table_name", sorted(TABLES))
def test_table_schema_matches_model(tf, table_name):
    model, _ = TABLES[table_name]
    table = tf.of_type("aws_dynamodb_table").get(table_name)
    assert table is not None, f"no aws_dynamodb_table.{table_name}"
    problems = schema_problems(table, model, f"aws_dynamodb_table.{table_name}")
    assert not problems, "Terraform and the PynamoDB models disagree:\n" + "\n".join(problems)


@pytest.mark.parametrize("table_name", sorted(TABLES))
def test_table_default_name_is_the_codes_default(tf, table_name):
    """With the default name_prefix, a table gets the name Deployment defaults to."""
    _, field_name = TABLES[table_name]
    table = tf.of_type("aws_dynamodb_table")[table_name]
    expression = _text(table.get("name"))
    for local in LOCAL_REF.findall(expression):
        expression += _text(tf.locals.get(local))
    match = re.search(r"\$\{var\.name_prefix\}([A-Za-z0-9._-]*)", expression)
    assert match, (f"aws_dynamodb_table.{table_name}: name should be derived from var.name_prefix, "
                   f"is {table.get('name')!r}")
    default = tf.variables["name_prefix"].get("default") + match.group(1)
    assert default == getattr(Deployment, field_name), (
        f"aws_dynamodb_table.{table_name} is named {default!r} by default, "
        f"dataplane/deployment.py defaults to {getattr(Deployment, field_name)!r}")


@pytest.mark.parametrize("table_name", sorted(TABLES))
def test_table_is_recoverable_and_encrypted(tf, table_name):
    table = tf.of_type("aws_dynamodb_table")[table_name]
    where = f"aws_dynamodb_table.{table_name}"
    assert one_block(table, "point_in_time_recovery", where).get("enabled") is True, f"{where}: enable PITR"
    assert one_block(table, "server_side_encryption", where).get("enabled") is True, f"{where}: enable SSE"


def test_segments_table_expires_writer_state_by_ttl(tf):
    """Idle writers' state items carry the attribute DynamoDB's TTL must watch (dataplane/models.py)."""
    from dataplane.models import EXPIRES_AT

    table = tf.of_type("aws_dynamodb_table")["segments"]
    ttl = one_block(table, "ttl", "aws_dynamodb_table.segments")
    assert (ttl.get("attribute_name"), ttl.get("enabled")) == (EXPIRES_AT, True)


def test_schema_check_detects_drift(tf):
    """The schema check itself works: a renamed index key, a stray attribute, a missing index all fail it."""
    metadata = tf.of_type("aws_dynamodb_table")["metadata"]
    assert not schema_problems(metadata, MetadataItem, "metadata")

    renamed = copy.deepcopy(metadata)
    renamed["global_secondary_index"][0]["range_key"] = "pending_at"
    for attribute in renamed["attribute"]:
        if attribute["name"] == "pending_since":
            attribute["name"] = "pending_at"
    problems = schema_problems(renamed, MetadataItem, "metadata")
    assert any("pending_since" in p for p in problems) and any("pending_at" in p for p in problems), problems

    stray = copy.deepcopy(metadata)
    stray["attribute"].append({"name": "kind", "type": "S"})
    problems = schema_problems(stray, MetadataItem, "metadata")
    assert any("'kind' is declared but is not a key" in p for p in problems), problems

    no_index = copy.deepcopy(tf.of_type("aws_dynamodb_table")["segments"])
    del no_index["global_secondary_index"]
    problems = schema_problems(no_index, SegmentMeta, "segments")
    assert any("'tiering'" in p and "missing" in p for p in problems), problems

    assert any("range_key" in p for p in schema_problems(metadata | {"range_key": "sort"}, MetadataItem, "m"))


# -- S3 ----------------------------------------------------------------------------------------------


def _bucket_settings(tf: Terraform, rtype: str) -> dict:
    found = [r for r in tf.of_type(rtype).values() if ("aws_s3_bucket", "segments") in refs(r.get("bucket"))]
    assert len(found) == 1, f"aws_s3_bucket.segments needs exactly one {rtype}, has {len(found)}"
    return found[0]


def test_bucket_is_private_encrypted_and_unversioned(tf):
    assert set(tf.of_type("aws_s3_bucket")) == {"segments"}, "one bucket, aws_s3_bucket.segments"
    block = _bucket_settings(tf, "aws_s3_bucket_public_access_block")
    settings = ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets")
    for setting in settings:
        assert block.get(setting) is True, f"public access block: {setting} must be true"
    ownership = _bucket_settings(tf, "aws_s3_bucket_ownership_controls")
    assert one_block(ownership, "rule", "ownership controls").get("object_ownership") == "BucketOwnerEnforced"
    encryption = _bucket_settings(tf, "aws_s3_bucket_server_side_encryption_configuration")
    rule = one_block(encryption, "rule", "encryption")
    default = one_block(rule, "apply_server_side_encryption_by_default", "encryption rule")
    assert default.get("sse_algorithm") in ("AES256", "aws:kms"), "encrypt segment objects at rest"
    for versioning in tf.of_type("aws_s3_bucket_versioning").values():
        status = one_block(versioning, "versioning_configuration", "versioning").get("status")
        assert status != "Enabled", "segments are immutable and deleted explicitly: keep versioning off"


# -- Lambda ------------------------------------------------------------------------------------------


def test_the_four_functions_are_declared(tf):
    assert set(functions(tf)) == set(FUNCTIONS)


def test_function_memory_is_what_the_cost_model_and_standalone_bill(tf):
    """bench/cost.py prices each function's duration at its memory, and standalone meters it so: the
    tails function at var.tails_memory_mb, the others at 512 MB."""
    if str(ROOT) not in sys.path:  # bench/ is not an installed package (alone, tests/infra has no path to it)
        sys.path.insert(0, str(ROOT))
    from bench.cost import FUNCTION_MEMORY_MB, TAILS_MEMORY_MB
    from standalone.stack import FUNCTION_MEMORY_MB as STANDALONE_MEMORY_MB

    for handler in FUNCTIONS:
        name, fn = function(tf, handler)
        if handler == TAILS:
            assert _text(fn.get("memory_size")) == "${var.tails_memory_mb}", name
        else:
            assert fn.get("memory_size") == FUNCTION_MEMORY_MB, name
    assert tf.variables["tails_memory_mb"].get("default") == TAILS_MEMORY_MB == STANDALONE_MEMORY_MB["tails"]


def _handler_problems(handler: str, sources: dict[str, str]) -> list[str]:
    module, _, name = handler.rpartition(".")
    parts = module.split(".")
    if not module or parts[0] not in sources:
        holds = sorted(sources)
        return [f"handler {handler}: its top-level package {parts[0]!r} is not one the zip holds {holds}"]
    path = ROOT.joinpath(sources[parts[0]], *parts[1:]).with_suffix(".py")
    if not path.is_file():
        return [f"handler {handler}: {path.relative_to(ROOT)} does not exist"]
    tree = ast.parse(path.read_text(), filename=str(path))
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not defs:
        return [f"handler {handler}: {path.relative_to(ROOT)} has no top-level function {name}()"]
    if isinstance(defs[-1], ast.AsyncFunctionDef):
        return [f"handler {handler}: a Python Lambda handler cannot be async"]
    if len(defs[-1].args.posonlyargs + defs[-1].args.args) != 2:
        return [f"handler {handler}: {name}() must take (event, context)"]
    return []


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_handler_resolves_to_a_function(tf, build, handler):
    function(tf, handler)
    problems = _handler_problems(handler, build.SOURCES)
    assert not problems, "\n".join(problems)


def test_handler_check_detects_a_missing_function(build):
    assert _handler_problems("lambdas.read.handler.nope", build.SOURCES)
    assert _handler_problems("lambdas.nowhere.handler.handler", build.SOURCES)
    assert _handler_problems("elsewhere.handler.handler", build.SOURCES)


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_function_runtime_and_artifact_match_the_build(tf, build, handler):
    name, fn = function(tf, handler)
    where = f"aws_lambda_function.{name}"
    assert fn.get("runtime") == f"python{build.PYTHON_VERSION}", (
        f"{where}: runtime {fn.get('runtime')!r}, "
        f"but build_lambda.py builds for Python {build.PYTHON_VERSION}")
    assert refs(fn.get("filename")) == set() and "local.lambda_zip" in _text(fn.get("filename")), (
        f"{where}: filename should be local.lambda_zip (var.lambda_zip resolved against the module)")
    assert "local.lambda_zip" in _text(fn.get("source_code_hash")), (
        f"{where}: source_code_hash must follow the zip")
    assert as_list(fn.get("architectures")) == ["${var.lambda_architecture}"], (
        f"{where}: use var.lambda_architecture")
    if handler == TAILS:  # see lambda.tf: its tracing and platform log lines would cost more than the check
        assert one_block(fn, "tracing_config", where).get("mode") == "PassThrough", f"{where}: tracing PassThrough"
        logging = one_block(fn, "logging_config", where)
        assert (logging.get("log_format"), logging.get("system_log_level")) == ("JSON", "WARN"), where
    elif handler in (APPEND, READ):  # the data path: tracing priced out by default, Active on request
        assert one_block(fn, "tracing_config", where).get("mode") == "${var.data_path_tracing}", where
        assert tf.variables["data_path_tracing"].get("default") == "PassThrough"
    else:
        assert one_block(fn, "tracing_config", where).get("mode") == "Active", f"{where}: tracing mode Active"


def test_terraform_defaults_match_the_build_script(tf, build):
    assert tf.variables["lambda_architecture"].get("default") == build.DEFAULT_ARCH
    zip_default = (TF_DIR / tf.variables["lambda_zip"].get("default")).resolve()
    assert zip_default == (ROOT / "build" / "lambda.zip").resolve(), (
        f"var.lambda_zip defaults to {zip_default}, build_lambda.py writes build/lambda.zip")


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_function_url_uses_iam_auth(tf, handler):
    name, _ = function(tf, handler)
    url_name, url = function_url(tf, name)
    where = f"aws_lambda_function_url.{url_name}"
    assert url.get("authorization_type") == "AWS_IAM", f"{where}: authorization_type must be AWS_IAM"
    assert url.get("invoke_mode") == "BUFFERED", f"{where}: invoke_mode must be BUFFERED"
    assert "qualifier" not in url, f"{where}: the clients call the unqualified function"


def test_no_public_invoke_permission(tf):
    for name, permission in tf.of_type("aws_lambda_permission").items():
        assert permission.get("principal") != "*", f"aws_lambda_permission.{name} makes a function public"


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_function_has_its_log_group_with_retention(tf, handler):
    name, fn = function(tf, handler)
    expected = "/aws/lambda/" + _text(fn.get("function_name"))
    groups = [(n, g) for n, g in tf.of_type("aws_cloudwatch_log_group").items() if g.get("name") == expected]
    assert len(groups) == 1, (
        f"aws_lambda_function.{name} needs one aws_cloudwatch_log_group named {expected!r}")
    group_name, group = groups[0]
    retention = group.get("retention_in_days")
    assert retention not in (None, 0, "0"), f"aws_cloudwatch_log_group.{group_name}: set retention_in_days"
    assert ("aws_cloudwatch_log_group", group_name) in refs(fn.get("depends_on")), (
        f"aws_lambda_function.{name} must depend on aws_cloudwatch_log_group.{group_name}, or an early "
        "invocation creates the group without retention")

    role = role_of(tf, name, fn)
    for doc_name, document in role_policy_documents(tf, role):
        for statement in statements(document):
            if any(a.startswith("logs:") for a in as_list(statement.get("actions"))):
                assert "logs:CreateLogGroup" not in as_list(statement.get("actions")), (
                    f"data.aws_iam_policy_document.{doc_name}: the log group is Terraform's; "
                    "no CreateLogGroup")
                targets = set().union(*(refs(r) for r in as_list(statement.get("resources"))))
                assert targets == {("aws_cloudwatch_log_group", group_name)}, (
                    f"data.aws_iam_policy_document.{doc_name}: logs permissions must name only "
                    f"aws_cloudwatch_log_group.{group_name}, not {sorted(targets)}")


def test_each_function_has_a_role_of_its_own(tf):
    roles: dict[str, str] = {}
    for name, fn in functions(tf).values():
        role = role_of(tf, name, fn)
        assert role not in roles, (
            f"aws_lambda_function.{name} shares aws_iam_role.{role} with {roles.get(role)}")
        roles[role] = name
        body = tf.of_type("aws_iam_role")[role]
        for attribute in ("managed_policy_arns", "inline_policy"):
            assert attribute not in body, f"aws_iam_role.{role}: use aws_iam_role_policy, not {attribute}"
        trust = [n for t, n in data_refs(body.get("assume_role_policy")) if t == "aws_iam_policy_document"]
        assert len(trust) == 1, (
            f"aws_iam_role.{role}: assume_role_policy must be a data.aws_iam_policy_document")
        principals = [p for s in statements(tf.data["aws_iam_policy_document"][trust[0]])
                      for p in blocks(s, "principals")]
        lambda_only = all(as_list(p.get("identifiers")) == ["lambda.amazonaws.com"] for p in principals)
        assert principals and lambda_only, (
            f"aws_iam_role.{role}: only the Lambda service may assume it")
        assert role_policy_documents(tf, role), f"aws_iam_role.{role} has no aws_iam_role_policy"
    for name, attachment in tf.of_type("aws_iam_role_policy_attachment").items():
        attached = {n for t, n in refs(attachment.get("role")) if t == "aws_iam_role"}
        assert not attached & set(roles), (
            f"aws_iam_role_policy_attachment.{name} attaches a managed policy to a function role; "
            "keep the permissions inline, where these tests check them")


def _classify(resource: str) -> str:
    if resource == "*":
        return "any"
    targets = refs(resource)
    assert len(targets) == 1, f"resource {resource!r} should name exactly one Terraform resource"
    (rtype, name), = targets
    if rtype == "aws_dynamodb_table":
        return f"{name}-index" if "/index/" in resource else name
    if rtype == "aws_s3_bucket":
        if resource.endswith("/segments/*"):
            return "objects"
        assert "/" not in resource.split("}", 1)[-1], f"unexpected object ARN {resource!r}"
        return "bucket"
    if rtype == "aws_cloudwatch_log_group":
        return "logs"
    return f"{rtype}.{name}"


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_role_permissions_are_the_reviewed_ones(tf, handler):
    name, fn = function(tf, handler)
    role = role_of(tf, name, fn)
    granted: dict[str, set[str]] = {}
    for _doc_name, document in role_policy_documents(tf, role):
        for statement in statements(document):
            if statement.get("effect", "Allow") != "Allow":
                continue
            for resource in as_list(statement.get("resources")):
                granted.setdefault(_classify(resource), set()).update(as_list(statement.get("actions")))
    expected = EXPECTED_GRANTS[handler]
    differences = []
    for target in sorted(set(granted) | set(expected)):
        extra = granted.get(target, set()) - expected.get(target, set())
        missing = expected.get(target, set()) - granted.get(target, set())
        if extra:
            differences.append(f"  {target}: granted but not reviewed: {sorted(extra)}")
        if missing:
            differences.append(f"  {target}: needed by the code but not granted: {sorted(missing)}")
    assert not differences, (f"aws_iam_role.{role} (function {name}) differs from EXPECTED_GRANTS:\n"
                             + "\n".join(differences))


@pytest.mark.parametrize("handler", [APPEND, READ, TAILS])
def test_data_functions_read_only_the_grant_items_of_the_metadata_table(tf, handler):
    """Authorization reads grants in every function; outside the controller, no other metadata item."""
    name, fn = function(tf, handler)
    for _doc_name, document in role_policy_documents(tf, role_of(tf, name, fn)):
        for statement in statements(document):
            if not any(_classify(r).startswith("metadata") for r in as_list(statement.get("resources"))):
                continue
            leading = [c for c in blocks(statement, "condition") if c.get("variable") == "dynamodb:LeadingKeys"]
            assert [(c.get("test"), as_list(c.get("values"))) for c in leading] == [
                ("ForAllValues:StringLike", GRANT_PARTITIONS)], f"{name}: statement {statement.get('sid')}"


def _unbounded_listing(document: dict) -> list[str]:
    """s3:ListBucket grants whose s3:prefix condition does not keep them inside ``segments/``."""
    problems = []
    for i, statement in enumerate(statements(document)):
        if statement.get("effect", "Allow") != "Allow" or "s3:ListBucket" not in as_list(statement.get("actions")):
            continue
        prefixes = [value for condition in blocks(statement, "condition") if condition.get("variable") == "s3:prefix"
                    and condition.get("test") in ("StringLike", "StringEquals") for value in as_list(condition["values"])]
        if not prefixes or not all(value.startswith("segments/") for value in prefixes):
            problems.append(f"statement {statement.get('sid') or i}: s3:ListBucket with s3:prefix {prefixes}")
    return problems


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_bucket_listing_is_limited_to_the_deployments_prefix(tf, handler):
    """A role may list only the deployment's objects (segments/...), never the whole bucket."""
    name, fn = function(tf, handler)
    problems = [f"data.aws_iam_policy_document.{doc_name} {problem}"
                for doc_name, document in role_policy_documents(tf, role_of(tf, name, fn))
                for problem in _unbounded_listing(document)]
    assert not problems, "\n".join(problems)


def test_listing_check_detects_an_unconditioned_grant():
    bare = {"statement": [{"actions": ["s3:ListBucket"], "resources": ["${aws_s3_bucket.segments.arn}"]}]}
    wide = {"statement": [{"actions": ["s3:ListBucket"], "resources": ["${aws_s3_bucket.segments.arn}"],
                           "condition": [{"test": "StringLike", "variable": "s3:prefix", "values": ["*"]}]}]}
    narrow = {"statement": [{"actions": ["s3:ListBucket"], "resources": ["${aws_s3_bucket.segments.arn}"],
                             "condition": [{"test": "StringLike", "variable": "s3:prefix", "values": ["segments/*"]}]}]}
    assert len(_unbounded_listing(bare)) == 1 and len(_unbounded_listing(wide)) == 1
    assert not _unbounded_listing(narrow)

# Actions that AWS authorizes only on resource "*": X-Ray's, ECS Exec's channels (the UI's port
# forward), the ECR login and the run launcher's lookup of its task definition.
UNSCOPED_ACTIONS = XRAY | {
    "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel", "ecr:GetAuthorizationToken", "ecs:DescribeTaskDefinition",
}


def _wildcard_problems(doc_name: str, document: dict) -> list[str]:
    problems = []
    for i, statement in enumerate(statements(document)):
        where = f"data.aws_iam_policy_document.{doc_name} statement {statement.get('sid') or i}"
        if statement.get("effect", "Allow") != "Allow":
            continue  # a broad Deny only narrows
        for negated in ("not_actions", "not_resources"):
            if negated in statement:
                problems.append(f"{where}: Allow with {negated} grants everything else")
        actions = as_list(statement.get("actions"))
        for action in actions:
            if "*" in action:
                problems.append(f"{where}: wildcard action {action!r}; list the actions")
        for resource in as_list(statement.get("resources")):
            if resource == "*":
                if not actions or not set(actions) <= UNSCOPED_ACTIONS:
                    problems.append(f"{where}: resource \"*\" is only for actions that support no resource-level "
                                    f"permissions ({sorted(UNSCOPED_ACTIONS)}), got {actions}")
            elif not refs(resource) and not data_refs(resource):
                problems.append(f"{where}: resource {resource!r} is a hard-coded ARN; "
                                "refer to the Terraform resource")
    return problems


def test_iam_policies_have_no_wildcards(tf):
    documents = tf.data.get("aws_iam_policy_document", {})
    problems = [p for name, document in sorted(documents.items()) for p in _wildcard_problems(name, document)]
    assert not problems, "\n".join(problems)
    for rtype in ("aws_iam_role_policy", "aws_iam_policy"):
        for name, policy in tf.of_type(rtype).items():
            assert any(t == "aws_iam_policy_document" for t, _ in data_refs(policy.get("policy"))), (
                f"{rtype}.{name}: write the policy as a data.aws_iam_policy_document "
                "so that it is checked here")


def test_wildcard_check_detects_wildcards():
    bad = {"statement": [{"actions": ["s3:*"], "resources": ["${aws_s3_bucket.segments.arn}"]},
                         {"actions": ["dynamodb:GetItem"], "resources": ["*"]},
                         {"actions": ["s3:GetObject"], "resources": ["arn:aws:s3:::*"]}]}
    assert len(_wildcard_problems("bad", bad)) == 3
    ok = {"statement": [{"actions": ["xray:PutTraceSegments"], "resources": ["*"]},
                        {"effect": "Deny", "actions": ["s3:*"], "resources": ["*"]}]}
    assert not _wildcard_problems("ok", ok)


def _environment(fn_name: str, fn: dict) -> dict[str, Any]:
    return one_block(fn, "environment", f"aws_lambda_function.{fn_name}").get("variables") or {}


def _hard_env_reads(handler: str, sources: dict[str, str]) -> set[str]:
    """Variables the handler's code reads as os.environ["NAME"] (a KeyError when unset)."""
    names = set()
    for path in first_party_closure(handler.rpartition(".")[0], sources)[0].values():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "environ" and isinstance(node.slice, ast.Constant)):
                names.add(node.slice.value)
    return names


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_function_environment_is_what_the_code_reads(tf, build, handler):
    name, fn = function(tf, handler)
    where = f"aws_lambda_function.{name}"
    env = _environment(name, fn)
    required = dict(COMMON_ENV)
    if handler == CONTROLLER:
        for variable, other in CONTROLLER_URL_ENV.items():
            required[variable] = ("aws_lambda_function_url", function_url(tf, function(tf, other)[0])[0])
    for variable, source in sorted(required.items()):
        assert variable in env, f"{where}: environment variable {variable} is not set"
        assert source in refs(env[variable]), (
            f"{where}: {variable} should come from {'.'.join(source)}, is {env[variable]!r}")
    missing = _hard_env_reads(handler, build.SOURCES) - set(env)
    assert not missing, f"{where}: the code reads os.environ{sorted(missing)} but they are not set"
    assert not FORBIDDEN_ENV & set(env), f"{where}: {sorted(FORBIDDEN_ENV & set(env))} must not be set on AWS"
    assert env.get("POWERTOOLS_SERVICE_NAME"), f"{where}: set POWERTOOLS_SERVICE_NAME"
    assert env.get("POWERTOOLS_METRICS_NAMESPACE") == "Rillet", (
        f"{where}: POWERTOOLS_METRICS_NAMESPACE must be Rillet")
    assert env.get("POWERTOOLS_LOG_LEVEL"), f"{where}: set POWERTOOLS_LOG_LEVEL"


def test_outputs(tf):
    wanted = {
        "controller_api_url": ("aws_lambda_function_url", function_url(tf, function(tf, CONTROLLER)[0])[0]),
        "append_url": ("aws_lambda_function_url", function_url(tf, function(tf, APPEND)[0])[0]),
        "read_url": ("aws_lambda_function_url", function_url(tf, function(tf, READ)[0])[0]),
        "tails_url": ("aws_lambda_function_url", function_url(tf, function(tf, TAILS)[0])[0]),
        "metadata_table_name": ("aws_dynamodb_table", "metadata"),
        "segments_table_name": ("aws_dynamodb_table", "segments"),
        "bucket_name": ("aws_s3_bucket", "segments"),
    }
    for output, source in wanted.items():
        assert output in tf.outputs, f"output {output} is missing"
        assert source in refs(tf.outputs[output].get("value")), (
            f"output {output} should be {'.'.join(source)}")


def test_versions(tf):
    settings = [s for s in tf.settings if "required_version" in s]
    assert len(settings) == 1 and settings[0]["required_version"] == ">= 1.5", "terraform >= 1.5"
    providers = [p for s in tf.settings for p in blocks(s, "required_providers")]
    aws = [p["aws"] for p in providers if "aws" in p]
    assert aws and aws[0].get("source") == "hashicorp/aws", "use the hashicorp/aws provider"
    assert aws[0].get("version", "").startswith("~> 5."), (
        "pin the AWS provider to ~> 5.x")


# -- the code artifact -------------------------------------------------------------------------------


def _module_file(module: str, sources: dict[str, str]) -> Path | None:
    parts = module.split(".")
    base = ROOT.joinpath(sources[parts[0]], *parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py") if len(parts) > 1 else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Absolute names of the modules a module imports (skipping ``if TYPE_CHECKING:`` blocks)."""
    def visit(node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (name for child in node.orelse for name in visit(child))
            return
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".")
                package = package[:len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)  # maybe submodules
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    yield from visit(tree)


def first_party_closure(module: str, sources: dict[str, str]) -> tuple[dict[str, Path], set[str]]:
    """The first-party modules ``module`` loads (name -> file) and the other top-level names it imports."""
    seen: dict[str, Path] = {}
    third_party: set[str] = set()
    queue = [module]
    while queue:
        name = queue.pop()
        parts = name.split(".")
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            path = _module_file(prefix, sources)
            if path is None:
                if i == len(parts) and i > 1 and _module_file(".".join(parts[:-1]), sources):
                    break  # "from a.b import c" where c is a name in a.b, not a module
                raise AssertionError(f"{module} imports {name}, but {prefix} is not in the repository")
            seen[prefix] = path
            for imported in _imports(ast.parse(path.read_text()), prefix, path.name == "__init__.py"):
                top = imported.split(".")[0]
                if top in sources:
                    queue.append(imported)
                elif top != "__future__" and top not in sys.stdlib_module_names:
                    third_party.add(top)
    return seen, third_party


def _distribution_closure(requirements: tuple[str, ...]) -> set[str]:
    """The requirements and, recursively, their dependencies (as installed in the test environment)."""
    def normalize(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    found: set[str] = set()
    queue = [normalize(r) for r in requirements]
    while queue:
        name = queue.pop()
        if name in found:
            continue
        found.add(name)
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                queue.append(normalize(requirement.name))
    return found


def test_zip_holds_everything_the_handlers_import(build):
    providers = importlib.metadata.packages_distributions()
    bundled = _distribution_closure(build.RUNTIME_REQUIREMENTS)
    problems = []
    for handler in FUNCTIONS:
        modules, third_party = first_party_closure(handler.rpartition(".")[0], build.SOURCES)
        for top in sorted(third_party):
            dists = {re.sub(r"[-_.]+", "-", d).lower() for d in providers.get(top, [])}
            if not dists & bundled:
                origin = sorted(dists) or "an unknown distribution"
                problems.append(f"{handler} imports {top!r} (from {origin}), "
                                "which build_lambda.py RUNTIME_REQUIREMENTS does not bring")
        assert modules, handler
    assert not problems, "\n".join(problems)


def test_build_script_pins_come_from_the_lock(build):
    pins = build.locked_pins(ROOT / "requirements.lock")
    for requirement in build.RUNTIME_REQUIREMENTS:
        assert build.normalize(requirement) in pins, f"requirements.lock pins no version of {requirement}"
    for package, source in build.SOURCES.items():
        assert (ROOT / source / "__init__.py").is_file(), (
            f"build_lambda.py copies {source} as {package}: not a package")


# -- terraform fmt -------------------------------------------------------------------------------------

_HEREDOC = re.compile(r"<<-?([A-Za-z_][A-Za-z0-9_-]*)\s*$")


_INTERPOLATION_ONLY = re.compile(r'"\$\{[^{}"]*\}"')


@dataclass
class _Line:
    net_brackets: int  # as hclwrite counts them: ( [ { and ${ open, ) ] } close
    equals: int | None  # column of the attribute's "=", if the line is a one-line attribute assignment
    heredoc: str | None
    code: str  # the line without its comment


def _lex(line: str) -> _Line:
    """The bracket balance and assignment "=" of one line of HCL, outside strings and comments."""
    tokens: list[tuple[str, int]] = []  # (kind, column); kind in open, close, equals, other
    stack: list[str] = []  # "string", "interp" (a ${ } in a string), "brace" (a { } inside an interp)
    heredoc = None
    code_end = len(line)
    i = 0
    while i < len(line):
        c = line[i]
        if stack and stack[-1] == "string":
            if c == "\\":
                i += 2
                continue
            if line.startswith(("$${", "%%{"), i):
                i += 3
                continue
            if line.startswith(("${", "%{"), i):
                stack.append("interp")
                tokens.append(("open", i))
                i += 2
                continue
            if c == '"':
                stack.pop()
            i += 1
            continue
        if c == '"':
            stack.append("string")
            tokens.append(("other", i))
        elif c == "#" or line.startswith(("//", "/*"), i):
            code_end = i
            break
        elif line.startswith("<<", i) and _HEREDOC.match(line, i):
            heredoc = _HEREDOC.match(line, i).group(1)
            tokens.append(("other", i))
            break
        elif c in "([{":
            tokens.append(("open", i))
            if stack and c == "{":
                stack.append("brace")
        elif c in ")]}":
            tokens.append(("close", i))
            if stack and c == "}":
                stack.pop()
        elif c == "=":
            before, after = line[i - 1:i], line[i + 1:i + 2]
            if before in ("=", "!", "<", ">") or after in ("=", ">"):
                tokens.append(("other", i))  # ==, !=, <=, >=, =>
                if after in ("=", ">"):
                    i += 1
            else:
                tokens.append(("equals", i))
        elif not c.isspace():
            tokens.append(("other", i))
        i += 1
    net = sum(1 if kind == "open" else -1 if kind == "close" else 0 for kind, _ in tokens)
    equals = None
    for position, (kind, column) in enumerate(tokens):
        if kind == "equals" and position > 0:
            rhs = tokens[position:]
            if sum(1 if k == "open" else -1 if k == "close" else 0 for k, _ in rhs) == 0:
                equals = column  # hclwrite aligns only assignments whose value ends on the line
            break
    return _Line(net, equals, heredoc, line[:code_end])


def fmt_problems(text: str, name: str) -> list[str]:
    """Where ``terraform fmt`` would change the file: tabs, trailing whitespace, indentation that is not
    two spaces per bracket level (hclwrite's rule), "=" of consecutive one-line attributes that are not
    aligned one space after the longest name (a blank or comment line ends such a group), and
    interpolation-only strings ("${var.x}", which fmt unwraps to var.x)."""
    problems = []
    if text and not text.endswith("\n"):
        problems.append(f"{name}: the file does not end with a newline")
    if text.endswith("\n\n"):
        problems.append(f"{name}: blank lines at the end of the file")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    indents: list[int] = []
    chain: list[tuple[int, str, int]] = []  # (line number, line, "=" column) of consecutive assignments
    heredoc_end = None

    def close_chain() -> None:
        if chain:
            column = max(len(line[:eq].rstrip()) for _, line, eq in chain) + 1
            for number, line, eq in chain:
                if eq != column:
                    problems.append(f"{name}:{number}: '=' at column {eq + 1}, terraform fmt aligns it at "
                                    f"column {column + 1} with the lines around it")
                elif line[eq + 1:eq + 2] != " " or line[eq + 2:eq + 3] == " ":
                    problems.append(f"{name}:{number}: put exactly one space after '='")
            chain.clear()

    for number, line in enumerate(lines, 1):
        if "\t" in line:
            problems.append(f"{name}:{number}: tab character (terraform fmt indents with spaces)")
        if line != line.rstrip():
            problems.append(f"{name}:{number}: trailing whitespace")
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        if not line.strip():
            close_chain()
            continue
        lexed = _lex(line.replace("\t", " "))
        indent = len(line) - len(line.lstrip(" \t"))
        if lexed.net_brackets > 0:
            expected = 2 * len(indents)
            indents.append(lexed.net_brackets)
        elif lexed.net_brackets < 0:
            closed = -lexed.net_brackets
            while closed > 0 and indents:
                if closed >= indents[-1]:
                    closed -= indents.pop()
                else:
                    indents[-1] -= closed
                    closed = 0
            expected = 2 * len(indents)
        else:
            expected = 2 * len(indents)
        if indent != expected:
            problems.append(f"{name}:{number}: indented {indent} spaces, terraform fmt indents it {expected}")
        for match in _INTERPOLATION_ONLY.finditer(lexed.code):
            problems.append(f"{name}:{number}: terraform fmt unwraps {match.group()} "
                            f"to {match.group()[3:-2]}")
        if lexed.equals is None:
            close_chain()
        else:
            chain.append((number, line, lexed.equals))
        heredoc_end = lexed.heredoc
    close_chain()
    if indents:
        problems.append(f"{name}: unbalanced brackets at the end of the file")
    return problems


@pytest.mark.parametrize("path", sorted(TF_DIR.glob("*.tf")), ids=lambda p: p.name)
def test_terraform_fmt(path):
    problems = fmt_problems(path.read_text(), path.name)
    assert not problems, "not formatted as terraform fmt would:\n" + "\n".join(problems)


def test_fmt_check_detects_violations():
    good = (
        'resource "aws_s3_bucket" "b" {\n'
        '  bucket        = "x-${var.y}"\n'
        '  force_destroy = true\n'
        '  tags = {\n'
        '    A   = "{not a bracket"\n'
        '    BCD = format("%s=%s", "a", "b")\n'
        '  }\n'
        '  list = [\n'
        '    "a",\n'
        '  ]\n'
        '\n'
        '  x = var.a == var.b ? 1 : 2\n'
        '}\n'
    )
    assert fmt_problems(good, "good.tf") == []
    assert any("tab" in p for p in fmt_problems(good.replace("  bucket", "\tbucket"), "t.tf"))
    assert any("trailing" in p for p in fmt_problems(good.replace("true\n", "true \n"), "t.tf"))
    misindented = good.replace("  force_destroy", "   force_destroy")
    assert any("indented 3" in p for p in fmt_problems(misindented, "t.tf"))
    assert any("indents it 4" in p for p in fmt_problems(good.replace('    "a"', '      "a"'), "t.tf"))
    assert any("'='" in p for p in fmt_problems(good.replace("bucket        =", "bucket =").replace(
        "force_destroy =", "force_destroy ="), "t.tf"))
    assert any("'='" in p for p in fmt_problems(good.replace("A   =", "A ="), "t.tf"))
    assert any("one space" in p for p in fmt_problems(good.replace("x = var.a", "x =  var.a"), "t.tf"))
    assert any("newline" in p for p in fmt_problems(good.rstrip("\n"), "t.tf"))
    assert any("unwraps" in p for p in fmt_problems(good.replace("var.a ==", '"${var.a}" =='), "t.tf"))


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary on this machine")
def test_terraform_fmt_check_with_the_binary(tmp_path):
    """Where a terraform binary is installed, the real ``terraform fmt -check`` (it needs no providers)."""
    env = dict(os.environ, CHECKPOINT_DISABLE="1", TF_CLI_CONFIG_FILE=str(tmp_path / "none.tfrc"))
    result = subprocess.run(["terraform", "fmt", "-check", "-diff", "-no-color", str(TF_DIR)],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, f"terraform fmt -check fails:\n{result.stdout}{result.stderr}"
