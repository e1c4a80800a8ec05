"""``rillet standalone``: start the whole stack on loopback and serve until Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import sys

from standalone import stopping
from standalone.stack import PortInUse, Stack, StackConfig

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
    """Start, serve until a stop signal, stop. Exits 130 after Ctrl-C (128 + the signal's number), at
    any moment of start-up too; 2, with nothing started, when a port is taken."""
    stopping.catch_stop_signals()  # before anything starts: from now on Ctrl-C stops what has started
    config = StackConfig(host=args.host, moto_port=args.moto_port, controller_port=args.controller_port,
                         append_port=args.append_port, read_port=args.read_port, tails_port=args.tails_port,
                         dagster_port=args.dagster_port, with_dagster=not args.no_dagster, log_dir=args.log_dir,
                         simulate_identities=args.simulate_identities)
    stack = Stack(config)
    try:
        print("starting Rillet standalone (data lives in memory and is gone when it stops) ...", flush=True)
        stack.start(cancel=stopping.requested)
        if stack.dagster:
            print("waiting for Dagster to load the code location ...", flush=True)
            stack.wait_for_dagster(cancel=stopping.requested)
    except PortInUse as e:
        for clash in e.clashes:
            line = json.dumps({"code": e.code, "message": clash}) if args.json else f"error: {e.code}: {clash}"
            print(line, file=sys.stderr)
        raise SystemExit(2) from None
    except stopping.StartCancelled:
        stack.stop()
        print("rillet standalone: interrupted while starting; stopped what had started", flush=True)
        raise SystemExit(stopping.exit_status()) from None
    except BaseException:
        stack.stop()
        raise
    try:
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
        stopping.requested.wait()
        print("stopping ...", flush=True)
    finally:
        stack.stop()
    print("stopped.", flush=True)
    raise SystemExit(stopping.exit_status())
