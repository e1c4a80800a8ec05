"""The standalone stack: everything Rillet needs, in one process tree on loopback.

* moto server with DynamoDB and S3 (data lives in memory and is gone when the stack stops),
* the tables and bucket, created from the same models the Terraform mirrors,
* the controller_api, append, read and tails handlers behind their own Function-URL-like ports,
* Dagster (webserver and daemon) loading ``dagster_project`` against the same endpoints.

With a log directory (``rillet standalone`` uses ``.rillet/logs``), the functions' output (powertools
log records and EMF metrics, what CloudWatch would receive) and Dagster's go to log files there, and
only warnings and errors reach the terminal (standalone/logs.py).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Self

from dataplane.deployment import Deployment
from rillet.errors import InvalidArgument
from standalone.faults import FAULTS_ENV, FaultConfig
from standalone.gateway import FunctionSpec, FunctionUrl, InvocationMeter
from standalone.logs import LOG_FILE_ENV, tee_process_output
from standalone.moto_server import MotoServer, RequestMeter
from standalone.resources import create_resources
from standalone.stopping import pause, raise_if_cancelled

# The functions' memory where it is not the default 512 MB, as infra/terraform/lambda.tf sets it (the
# invocation meter bills GB-seconds with it).
FUNCTION_MEMORY_MB = {"tails": 128}
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "standalone", "AWS_SECRET_ACCESS_KEY": "standalone"}
# Runs queue and at most two run at once: each is a process, and a laptop has a few cores. Sensors are
# evaluated in threads, as on AWS (infra/terraform/templates/dagster.yaml.tftpl): a long tick delays
# no other sensor's.
DAGSTER_INSTANCE = """\
telemetry:
  enabled: false
concurrency:
  runs:
    max_concurrent_runs: 2
sensors:
  use_threads: true
  num_workers: 4
"""
# How long Dagster has to stop by itself before it is killed. Its state is deleted right after (it lives in
# DAGSTER_HOME, and so do its code servers' sockets), so waiting longer keeps nothing: on two busy cores
# its webserver, daemon and code servers took 10 to 20 s to stop.
DAGSTER_STOP_S = 5


@dataclass
class StackConfig:
    host: str = "127.0.0.1"
    moto_port: int = 4566
    controller_port: int = 9090
    append_port: int = 9091
    read_port: int = 9092
    tails_port: int = 9093
    dagster_port: int = 3000
    with_dagster: bool = True
    workers: dict[str, int] = field(default_factory=lambda: {"controller": 2, "append": 3, "read": 3, "tails": 2})
    # Standalone runs the background jobs more often than a deployment would.
    sensor_intervals_s: dict[str, int] = field(default_factory=lambda: {
        "sweeper": 15, "tiering": 30, "txn_timeout": 10, "autoscale": 15, "watermark": 10})
    # Settings for every component (handlers and Dagster), e.g. RILLET_RATE_WINDOWS_S for fast auto-scaling.
    # One shard per index (dataplane/shards.py): moto has no partitions and scans the table for each index query.
    # Retention every 5 minutes (30 on AWS): a cycle reads a few items of every stream with a policy, so at
    # 1,000 idle streams a cycle a minute kept a core busy on moto.
    env: dict[str, str] = field(default_factory=lambda: {
        "RILLET_RETENTION_CRON": "*/5 * * * *", "RILLET_RETENTION_FREQUENCY_MS": "60000", "RILLET_INDEX_SHARDS": "1"})
    # Faults injected into the AWS calls of the named functions' handlers (standalone/faults.py).
    faults: FaultConfig | None = None
    # Where the functions and Dagster write their output (one file each, emptied at start); None leaves
    # the functions' output on this process's stdout (with metrics off) and drops Dagster's.
    log_dir: str | None = None
    # Turn an x-rillet-identity header into the caller's IAM identity (standalone/gateway.py), to try
    # out grants as several principals; off by default, as on AWS only a signature names the caller.
    simulate_identities: bool = False

    @classmethod
    def ephemeral(cls, with_dagster: bool = False, faults: FaultConfig | None = None, **env: str) -> StackConfig:
        """Free ports everywhere: for tests and benchmarks that run beside a developer's stack."""
        config = cls(moto_port=0, controller_port=0, append_port=0, read_port=0, tails_port=0, dagster_port=0,
                     with_dagster=with_dagster, faults=faults)
        config.env.update(env)
        return config


class Stack:
    def __init__(self, config: StackConfig | None = None) -> None:
        self.config = config or StackConfig()
        self.requests = RequestMeter()
        self.invocations = InvocationMeter()
        self.moto: MotoServer | None = None
        self.functions: dict[str, FunctionUrl] = {}
        self.dagster: subprocess.Popen | None = None
        self.dagster_home: str | None = None
        self.deployment: Deployment | None = None
        self._log_files: set[str] = set()
        self._stopping = threading.Event()  # Dagster's reports of the runs a stop interrupts stay in its log

    @property
    def controller_url(self) -> str:
        return self.functions["controller"].url

    @property
    def dagster_url(self) -> str | None:
        return f"http://{self.config.host}:{self._dagster_port}" if self.dagster else None

    def start(self, cancel: threading.Event | None = None) -> Stack:
        """Start everything; each port is checked first (PortInUse names every clash, before anything
        starts). A failed start stops what it had started, and so does ``cancel`` (set by Ctrl-C in
        ``rillet standalone``), looked at between the steps and in their waits (StartCancelled)."""
        cfg = self.config
        raise_if_cancelled(cancel)
        if clashes := self.port_clashes():
            raise PortInUse(clashes)
        os.environ.update({k: os.environ.get(k, v) for k, v in FAKE_CREDENTIALS.items()})
        try:
            self.moto = MotoServer(cfg.host, cfg.moto_port, self.requests).start()
            raise_if_cancelled(cancel)
            self.deployment = Deployment(endpoint_url=self.moto.url)
            create_resources(self.deployment)
            raise_if_cancelled(cancel)
            # Trying grants (simulated identities), a grant added or removed must apply to the very next
            # command, whichever worker serves it: no grant cache (each request reads the grant count and
            # the caller's grants, two moto reads). Without identities there is nothing to cache.
            grants = {"RILLET_GRANTS_CACHE_S": "0"} if cfg.simulate_identities else {}
            env = {**FAKE_CREDENTIALS, **self.deployment.to_env(), "POWERTOOLS_TRACE_DISABLED": "true",
                   "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING", **grants, **cfg.env}
            for name, port in (("append", cfg.append_port), ("read", cfg.read_port), ("tails", cfg.tails_port)):
                spec = FunctionSpec(name, f"lambdas.{name}.handler.handler",
                                    FUNCTION_MEMORY_MB.get(name, FunctionSpec.memory_mb), workers=cfg.workers[name])
                self.functions[name] = FunctionUrl(spec, self._function_env(name, env), self.invocations,
                                                   cfg.host, port, cfg.simulate_identities)
            env = {**env, "RILLET_APPEND_URL": self.functions["append"].url,
                   "RILLET_READ_URL": self.functions["read"].url, "RILLET_TAILS_URL": self.functions["tails"].url}
            self.functions["controller"] = FunctionUrl(
                FunctionSpec("controller", "lambdas.controller_api.handler.handler", workers=cfg.workers["controller"]),
                self._function_env("controller", env), self.invocations, cfg.host, cfg.controller_port,
                cfg.simulate_identities)
            for function in self.functions.values():
                function.start(cancel)
            if cfg.with_dagster:
                self._start_dagster(env)
        except BaseException:
            self.stop()
            raise
        return self

    def port_clashes(self) -> list[str]:
        """One line for each configured port the stack cannot listen on (taken, or given twice), naming
        what it serves and the option that changes it."""
        cfg = self.config
        ports = [("moto: DynamoDB and S3", "--moto-port", cfg.moto_port),
                 ("controller API", "--controller-port", cfg.controller_port),
                 ("append API", "--append-port", cfg.append_port), ("read API", "--read-port", cfg.read_port),
                 ("tails API", "--tails-port", cfg.tails_port)]
        if cfg.with_dagster:
            ports.append(("Dagster UI", "--dagster-port", cfg.dagster_port))
        clashes: list[str] = []
        served: dict[int, str] = {}
        for what, option, port in ports:
            if not port:
                continue
            if port in served:
                problem = f"is also given to the {served[port]}"
            else:
                problem = _listen_problem(cfg.host, port)
                served[port] = what
            if problem:
                clashes.append(f"port {port} ({what}) {problem}; choose another with {option} (0 picks a free one)")
        return clashes

    def _function_env(self, name: str, env: dict[str, str]) -> dict[str, str]:
        """The environment of one function's workers: its log file (metrics on, as on AWS, where there
        is one), and the fault configuration only where it applies."""
        if self.config.log_dir:
            env = {**env, LOG_FILE_ENV: self.log_file(name), "POWERTOOLS_METRICS_DISABLED": "false"}
        faults = self.config.faults
        if faults is None or name not in faults.functions:
            return env
        return {**env, FAULTS_ENV: faults.for_function(name).to_env()}

    def _start_dagster(self, env: dict[str, str]) -> None:
        self.dagster_home = tempfile.mkdtemp(prefix="rillet-dagster-")
        with open(os.path.join(self.dagster_home, "dagster.yaml"), "w") as f:
            f.write(DAGSTER_INSTANCE)
        self._dagster_port = self.config.dagster_port or _free_port(self.config.host)
        intervals = {f"RILLET_{k.upper()}_INTERVAL_S": str(v) for k, v in self.config.sensor_intervals_s.items()}
        child_env = {**os.environ, **env, **intervals, "DAGSTER_HOME": self.dagster_home,
                     "TMPDIR": self.dagster_home, "RILLET_CONTROLLER_URL": self.controller_url}
        output = subprocess.PIPE if self.config.log_dir else subprocess.DEVNULL
        self.dagster = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-m", "dagster_project.definitions",
             "-h", self.config.host, "-p", str(self._dagster_port)],
            env=child_env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)  # its own process group: the terminal's Ctrl-C is for the stack
        if self.config.log_dir:
            tee_process_output("dagster", self.dagster.stdout, self.log_file("dagster"), self._stopping)

    def log_file(self, name: str) -> str:
        """The log file of a function or of Dagster, emptied the first time it is named."""
        path = os.path.join(self.config.log_dir, f"{name}.log")
        if name not in self._log_files:
            os.makedirs(self.config.log_dir, exist_ok=True)
            open(path, "w").close()
            self._log_files.add(name)
        return path

    def wait_for_dagster(self, timeout_s: float = 180, cancel: threading.Event | None = None) -> None:
        """Block until the Dagster webserver answers (it loads the code location first), or ``cancel``
        is set (StartCancelled)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            raise_if_cancelled(cancel)
            if self.dagster.poll() is not None:
                raise RuntimeError(f"dagster exited with {self.dagster.returncode}")
            try:
                with urllib.request.urlopen(f"{self.dagster_url}/server_info", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pause(1, cancel)
        raise TimeoutError("the Dagster webserver did not come up")

    def stop(self) -> None:
        """Stop everything that has started, and return once it has (calling it again does nothing)."""
        self._stopping.set()
        if self.dagster:
            _stop_process_group(self.dagster, DAGSTER_STOP_S)
        if self.dagster_home:
            shutil.rmtree(self.dagster_home, ignore_errors=True)
        for function in self.functions.values():
            function.stop()
        if self.moto:
            self.moto.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port(host: str) -> int:
    """A port nothing listens on."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listen_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port``, or None if it can."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers: TIME_WAIT is no clash
        try:
            s.bind((host, port))
        except OSError as e:
            return "is already in use" if e.errno == errno.EADDRINUSE else f"cannot be listened on at {host}: {e.strerror}"
    return None


def _stop_process_group(leader: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the leader's whole process group, then SIGKILL to what is left of it after the
    leader exits or ``grace_s``: Dagster's webserver, daemon, code servers and runs are in it, and one
    that outlived ``dagster dev`` stayed behind. Returns once the group is gone (or 5 s more)."""
    group = leader.pid  # started with start_new_session: the leader of its group
    _signal_group(group, signal.SIGTERM)
    try:
        leader.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(group, signal.SIGKILL)
    leader.wait()
    deadline = time.monotonic() + 5
    while _signal_group(group, 0) and time.monotonic() < deadline:  # the group's last members dying
        time.sleep(0.05)


def _signal_group(group: int, signum: int) -> bool:
    """Send ``signum`` to a process group; whether any process was left in it."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True


class PortInUse(InvalidArgument):
    """Ports the stack was told to listen on are taken (often by another stack: 9090 is also Pravega's
    and Prometheus' default) or given twice; ``clashes`` has one line for each."""

    code = "PortInUse"

    def __init__(self, clashes: list[str]) -> None:
        super().__init__("; ".join(clashes))
        self.clashes = clashes
