"""Running a ``rillet`` command: parse its arguments, act as ``--as`` says for this command only, and
turn what went wrong into one line on stderr and an exit code (docs/cli.md's table)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from rillet.cli.format import one_line
from rillet.cli.parser import DEFAULT_ENDPOINT, build_parser
from rillet.errors import InvalidArgument, NoSuchKey, NotFound, RilletError


class NotARilletController(RilletError):
    """The endpoint answered, but not as a Rillet controller does (moto's or Dagster's port, a web page):
    said as such rather than as the "not found" or "bad argument" its answer would otherwise read as."""

    code = "NotARilletController"


def exit_code(error: RilletError) -> int:
    """3 when what the command names does not exist (scripts can tell it apart), 2 for bad input, else 1."""
    if isinstance(error, (NotFound, NoSuchKey)):
        return 3
    if isinstance(error, InvalidArgument):
        return 2
    return 1


def _not_a_controller(endpoint: str, answer: str) -> NotARilletController:
    return NotARilletController(f"{endpoint} is not a Rillet controller (it answered with {answer}): point "
                                f"--endpoint or RILLET_ENDPOINT at one (the standalone stack's is {DEFAULT_ENDPOINT})")


def _report(args: argparse.Namespace, error: RilletError) -> int:
    """Print the error in one line (its body with ``--json``) on stderr; its exit code."""
    if args.json:
        print(json.dumps(error.to_wire()), file=sys.stderr)
    else:
        print(f"error: {error.code}: {error.message}", file=sys.stderr)
    return exit_code(error)


def run(argv: list[str]) -> int:
    """Run the command ``argv`` names; its exit code."""
    args = build_parser(argv).parse_args(argv)
    from rillet.api import SIMULATED_IDENTITY_ENV  # after parsing: --version and --help never load the models

    previous_identity = os.environ.get(SIMULATED_IDENTITY_ENV)
    if args.identity:
        os.environ[SIMULATED_IDENTITY_ENV] = args.identity  # every client the command builds sends it
    try:
        args.func(args)
    except json.JSONDecodeError:  # a success answer that is not JSON: a web page, not a controller
        return _report(args, _not_a_controller(args.endpoint, "a page that is not JSON"))
    except RilletError as e:
        if e.code.startswith("HTTP") and e.status in (400, 404, 405):  # an error without a Rillet error body
            e = _not_a_controller(args.endpoint, f"HTTP {e.status} without a Rillet error")
        return _report(args, e)
    except ValueError as e:  # a configuration the model rejects (pydantic errors are ValueErrors): a bad argument
        return _report(args, InvalidArgument(one_line(e)))
    except BrokenPipeError:  # the reader of stdout went away (`| head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
    finally:
        if args.identity:  # for this command only (main also runs in-process, from tests and scripts)
            if previous_identity is None:
                os.environ.pop(SIMULATED_IDENTITY_ENV, None)
            else:
                os.environ[SIMULATED_IDENTITY_ENV] = previous_identity
    return 0
