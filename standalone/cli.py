"""``rillet standalone``: start the whole stack on loopback and serve until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import threading

from standalone.stack import Stack, StackConfig

LOG_DIR = ".rillet/logs"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("standalone", help="run moto, the Lambda handlers and Dagster on loopback")
    defaults = StackConfig()
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--controller-port", type=int, default=defaults.controller_port)
    parser.add_argument("--append-port", type=int, default=defaults.append_port)
    parser.add_argument("--read-port", type=int, default=defaults.read_port)
    parser.add_argument("--tails-port", type=int, default=defaults.tails_port)
    parser.add_argument("--moto-port", type=int, default=defaults.moto_port)
    parser.add_argument("--dagster-port", type=int, default=defaults.dagster_port)
    parser.add_argument("--no-dagster", action="store_true", help="do not start Dagster")
    parser.add_argument("--simulate-identities", action="store_true",
                        help="take each request's IAM identity from its x-rillet-identity header (rillet --as ARN), "
                             "to try authorization grants locally")
    parser.add_argument("--log-dir", default=LOG_DIR,
                        help="where the functions' logs and metrics and Dagster's output go (default %(default)s); "
                             "the terminal shows only warnings and errors")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> None:
    config = StackConfig(host=args.host, moto_port=args.moto_port, controller_port=args.controller_port,
                         append_port=args.append_port, read_port=args.read_port, tails_port=args.tails_port,
                         dagster_port=args.dagster_port, with_dagster=not args.no_dagster, log_dir=args.log_dir,
                         simulate_identities=args.simulate_identities)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print("starting Rillet standalone (data lives in memory and is gone when it stops) ...", flush=True)
    stack = Stack(config).start()
    try:
        if stack.dagster:
            print("waiting for Dagster to load the code location ...", flush=True)
            stack.wait_for_dagster()
        print(f"""
Rillet standalone is up:
  controller API  {stack.controller_url}      (rillet --endpoint {stack.controller_url} ...)
  append API      {stack.functions['append'].url}
  read API        {stack.functions['read'].url}
  tails API       {stack.functions['tails'].url}      (tail checks of waiting readers)
  DynamoDB + S3   {stack.moto.url}      (moto; AWS_ENDPOINT_URL={stack.moto.url})
  Dagster UI      {stack.dagster_url or 'not started'}
  logs, metrics   {os.path.abspath(args.log_dir)}/<controller|append|read|tails|dagster>.log
                  (this terminal shows only warnings and errors)
Press Ctrl-C to stop.""", flush=True)
        stop.wait()
    finally:
        print("stopping ...", flush=True)
        stack.stop()
        print("stopped.", flush=True)
