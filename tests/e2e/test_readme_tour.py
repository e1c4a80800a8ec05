"""The README's five-minute tour runs as written (against the session stack, in a scope of its own)."""

import re
import shlex
import uuid
from pathlib import Path

import pytest

from rillet.cli import main as cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _tour() -> tuple[list[str], str]:
    text = README.read_text()
    tour = text[text.index("## A five-minute tour"):]
    shell = re.search(r"```sh\n(.*?)```", tour, re.DOTALL).group(1)
    python = re.search(r"Then from Python:\n\n```python\n(.*?)```", tour, re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in shell.splitlines() if line.strip().startswith("rillet ")]
    return commands, python


def test_the_readme_tour_works(url, capsys):
    scope = "tour" + uuid.uuid4().hex[:8]
    commands, python = _tour()
    assert len(commands) >= 4
    for command in commands:
        args = shlex.split(command.replace("demo", scope))[1:]
        assert cli(["--endpoint", url, *args]) == 0, command
    assert "orders" in capsys.readouterr().out
    code = python.replace('"demo"', f'"{scope}"').replace(
        '"demo/orders"', f'"{scope}/orders"').replace("print(read.event)", "seen.append(read.event)")
    namespace = {"seen": []}
    with pytest.MonkeyPatch.context() as env:  # the tour's clients name no URL: they find the stack as the CLI does
        env.setenv("RILLET_ENDPOINT", url)
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    assert sorted(e["order"] for e in namespace["seen"]) == list(range(1000))
    assert namespace["cut"].scope == scope
