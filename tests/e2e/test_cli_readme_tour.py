"""The README tour's second shell block (the CLI after the Python part) runs as written; the
following ``tail -f`` is left out, since it waits for Ctrl-C."""

import re
import shlex
import uuid
from pathlib import Path

from rillet.cli import main as cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> tuple[list[str], str, list[str]]:
    tour = README.read_text().split("## A five-minute tour", 1)[1]
    first, python, after = (re.search(pattern, tour, re.DOTALL).group(1) for pattern in (
        r"```sh\n(.*?)```", r"Then from Python:\n\n```python\n(.*?)```", r"Back in the shell.*?```sh\n(.*?)```"))

    def commands(block: str) -> list[str]:
        return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip().startswith("rillet ")]
    return commands(first), python, commands(after)


def test_the_cli_after_the_python_part(url, capsys, monkeypatch):
    scope = "tour" + uuid.uuid4().hex[:8]
    first, python, after = _blocks()
    for command in first:
        assert cli(["--endpoint", url, *shlex.split(command.replace("demo", scope))[1:]]) == 0, command
    code = python.replace('"demo"', f'"{scope}"').replace(
        '"demo/orders"', f'"{scope}/orders"').replace("print(read.event)", "pass")
    monkeypatch.setenv("RILLET_ENDPOINT", url)  # the tour's clients name no URL: they find the stack as the CLI does
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    capsys.readouterr()

    assert any(" -f " in c for c in after)
    outputs = {}
    for command in (c for c in after if " -f " not in c):
        args = shlex.split(command.replace("demo", scope))[1:]
        assert cli(["--endpoint", url, *args]) == 0, command
        outputs[args[1]] = capsys.readouterr().out
    assert re.search(r"epoch 1 +\|=+\d+=+\|=+\d+=+\|-+1-+\|-+2-+\|", outputs["segments"])
    assert "lag           0 B unread" in outputs["describe"]
    assert "policy     time >= 7d" in outputs["status"]
    assert outputs["write"].startswith("wrote 1 event (")
    assert outputs["read"] == '{"order": 1000, "customer": "c0"}\n'  # all before it was truncated
