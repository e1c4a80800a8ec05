"""``rillet standalone`` keeps its terminal for a person: the endpoints and where the logs are, warnings
and errors, and no metric JSON; the functions' log records and EMF metrics go to their log files. Ctrl-C
while it starts: test_standalone_stop.py."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from test_standalone_stop import Terminal

import rillet
from standalone.logs import LOG_FILE_ENV, route_worker_output, tee_process_output, terminal_line


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_terminal_shows_endpoints_and_no_metric_json_and_ctrl_c_stops_it(tmp_path, unique):
    """Ctrl-C once it runs: ``stopped.`` when every process of the stack has stopped, then exit 130."""
    logs = tmp_path / "logs"
    terminal = Terminal("--no-dagster", "--log-dir", str(logs))
    try:
        terminal.wait_for("Press Ctrl-C to stop.\n", 120)
        banner = terminal.output
        controller = re.search(r"controller API\s+(\S+)", banner)[1]
        assert f"{logs}/<controller|append|read|tails|dagster>.log" in banner
        assert _post(f"{controller}/v1/scopes", b'{"scope": ""}') == 400
        rillet.StreamManager(controller).create_scope(unique)
        rillet.StreamManager(controller).create_stream(unique, "s", rillet.StreamConfiguration())
        with rillet.EventStreamClientFactory(unique, controller).create_event_writer(
                "s", rillet.JsonSerializer()) as writer:
            writer.write_event({"n": 1})
        for _ in range(2):  # the README's `tail -f`, stopped with Ctrl-C while it waits for events
            tail = subprocess.Popen([sys.executable, "-m", "rillet.cli", "--endpoint", controller, "stream", "tail",
                                     "-f", f"{unique}/s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(3)
            tail.send_signal(signal.SIGINT)
            _, err = tail.communicate(timeout=30)
            assert tail.returncode == 130 and "Traceback" not in err, err
        terminal.interrupt()
        code, exit_after_s = terminal.finish(60)
        assert code == 130, terminal.output
        assert terminal.output[len(banner):].splitlines() == ["stopping ...", "stopped."], terminal.output
        assert exit_after_s < 3, f"exited {exit_after_s:.1f} s after it said stopped"
        assert terminal.survivors() == []
    finally:
        terminal.kill()  # a failed test leaves nothing running
    shown = terminal.output
    assert "Traceback" not in shown and "Error" not in shown, shown
    assert '"_aws"' not in shown and not any(line.startswith("{") for line in shown.splitlines())
    metrics = [json.loads(line) for line in (logs / "append.log").read_text().splitlines()
               if line.startswith("{") and '"_aws"' in line]
    assert metrics and metrics[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Rillet"


def test_a_worker_sends_its_records_and_metrics_to_its_file_and_warnings_to_the_terminal(tmp_path, monkeypatch,
                                                                                     capsys):
    path = tmp_path / "append.log"
    monkeypatch.setenv(LOG_FILE_ENV, str(path))
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # restored after the test
    terminal = tmp_path / "terminal"
    with open(terminal, "w") as stderr:
        monkeypatch.setattr(sys, "__stderr__", stderr)
        route_worker_output()
        logger = Logger(service=f"svc-{os.getpid()}", level="INFO")
        logger.info("a request")
        logger.warning("AWS throttled a request")
        metrics = Metrics(namespace="Rillet", service="append")
        metrics.add_metric(name="AppendedBytes", unit=MetricUnit.Bytes, value=1)
        metrics.flush_metrics()
        logging.getLogger(logger.name).handlers.clear()
    shown = terminal.read_text()
    assert shown == f"[append] WARNING: AWS throttled a request (details in {path})\n"
    written = path.read_text()
    assert '"a request"' in written and '"AWS throttled a request"' in written and '"_aws"' in written


def test_terminal_lines_are_warnings_and_errors_only():
    path = ".rillet/logs/dagster.log"
    assert terminal_line("dagster", "2026-11-24 22:50:00 +0000 - dagster.daemon.SensorDaemon - ERROR - "
                                    "sensor failed", path) == f"[dagster] ERROR: sensor failed (details in {path})"
    assert terminal_line("dagster", "2026-11-24 22:50:00 +0000 - dagster - INFO - tick", path) is None
    coloured = "\x1b[32m2026-11-24 23:23:51 +0000\x1b[0m - dagster - \x1b[31mERROR\x1b[0m - run failed"
    assert terminal_line("dagster", coloured, path) == f"[dagster] ERROR: run failed (details in {path})"
    assert terminal_line("dagster", "2026-11-24 23:23:51 +0000 - dagster - WARNING - sensor_definition.py:809: "
                                    "BetaWarning: Parameter `owners` is currently in beta", path) is None
    assert terminal_line("read", '{"_aws": {"Timestamp": 1}, "ReadBytes": [3]}', path) is None
    assert terminal_line("read", '{"level": "INFO", "message": "hello"}', path) is None
    assert terminal_line("read", '{"level": "ERROR", "message": "unexpected error"}', path) == (
        f"[read] ERROR: unexpected error (details in {path})")
    assert terminal_line("read", "{not json", path) is None


def test_what_a_child_reports_while_the_stack_stops_stays_in_its_log(tmp_path, capsys):
    """Stopping the stack interrupts Dagster's runs, which Dagster then reports as failures: the
    terminal shows none of it (the log file keeps it)."""
    stopping = threading.Event()
    reader, writer = os.pipe()
    path = tmp_path / "dagster.log"
    with os.fdopen(reader) as stream:
        thread = tee_process_output("dagster", stream, str(path), stopping)
        with os.fdopen(writer, "w") as out:
            out.write("2026-11-27 01:00:00 +0000 - dagster - ERROR - sensor failed\n")
            out.flush()
            time.sleep(0.5)
            stopping.set()
            out.write("2026-11-27 01:00:01 +0000 - dagster - ERROR - run interrupted\n")
        thread.join(timeout=10)
    shown = capsys.readouterr().err
    assert "sensor failed" in shown and "run interrupted" not in shown
    assert "run interrupted" in path.read_text()
