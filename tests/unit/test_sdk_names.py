"""``import rillet`` is lazy (PEP 562): the CLI's start-up must not pay for the SDK it does not use."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import rillet


def test_every_exported_name_resolves_to_its_module():
    for name in rillet.__all__:
        value = getattr(rillet, name)
        assert value.__module__ == rillet._MODULE_OF[name], name


def test_type_checking_imports_name_the_same_modules_as_the_lazy_table():
    tree = ast.parse(Path(rillet.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert imported == rillet._MODULE_OF


def test_import_rillet_loads_no_sdk_module_until_a_name_is_used():
    probe = ("import sys, rillet; heavy = [m for m in ('pydantic', 'rillet.writer', 'rillet.models', 'botocore')"
             " if m in sys.modules]; print(heavy); rillet.EventWriterConfig; print('rillet.writer_config' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True"
