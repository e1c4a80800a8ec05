#!/usr/bin/env python3
"""Build ``build/lambda.zip``, the one code artifact of the four Rillet Lambda functions.

The zip holds, at its root (which is what Lambda puts on ``sys.path``):

* the runtime dependencies, at the versions pinned in ``requirements.lock``, as wheels for the
  Lambda platform (``--platform manylinux2014_aarch64 --only-binary=:all:`` for arm64): only what the
  handlers import, not Dagster, Spark or moto;
* the server packages ``controlplane``, ``dataplane`` and ``lambdas``, and the SDK ``client/rillet``
  as ``rillet``.

boto3 and botocore are also in the Lambda runtime, but the runtime's copy changes under us; the zip
pins the tested one. Byte code is compiled for the target Python when the interpreter running this
script is that version (``unchecked-hash`` .pyc files, since /var/task is read-only and file times in
the zip are fixed), which shortens cold starts. The zip is reproducible: entries are sorted and
carry a fixed time, so rebuilding unchanged sources gives the same ``source_code_hash`` and
``terraform apply`` sees no change.

Usage (from the repository root; needs pip and access to the package index)::

    .venv/bin/python infra/build_lambda.py            # arm64, the Terraform default
    .venv/bin/python infra/build_lambda.py --arch x86_64

tests/infra/test_terraform.py checks that RUNTIME_REQUIREMENTS and SOURCES cover everything the
handlers import, and that PYTHON_VERSION and the default architecture match the Terraform.
"""

from __future__ import annotations

import argparse
import compileall
import os
import py_compile
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Distributions the handlers need at run time; their dependencies come along at the locked versions.
RUNTIME_REQUIREMENTS = ("aws-lambda-powertools", "aws-xray-sdk", "boto3", "pydantic", "pynamodb")

# Top-level packages of the zip -> their source directories in this repository.
SOURCES = {
    "controlplane": "controlplane",
    "dataplane": "dataplane",
    "lambdas": "lambdas",
    "rillet": "client/rillet",
}

PYTHON_VERSION = "3.11"  # the functions' runtime is python3.11 (infra/terraform/lambda.tf)
PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}
DEFAULT_ARCH = "arm64"

# Lambda takes a zip of at most 50 MB directly and at most 250 MB unzipped.
MAX_ZIP_BYTES = 50 * 1024 * 1024
MAX_UNZIPPED_BYTES = 250 * 1024 * 1024

ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_pins(lock: Path) -> dict[str, str]:
    """``name==version`` lines of the lock file, by normalized name."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[normalize(match.group(1))] = match.group(2)
    return pins


def install_dependencies(target: Path, lock: Path, arch: str, python_version: str, work: Path) -> None:
    pins = locked_pins(lock)
    missing = [r for r in RUNTIME_REQUIREMENTS if normalize(r) not in pins]
    if missing:
        raise SystemExit(f"{lock} pins no version of {', '.join(missing)}")
    constraints = work / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    command = [
        sys.executable, "-m", "pip", "install",
        "--target", str(target),
        "--platform", PLATFORMS[arch],
        "--implementation", "cp",
        "--python-version", python_version,
        "--only-binary=:all:",
        "--no-compile",
        "--disable-pip-version-check",
        "--constraint", str(constraints),
        *(f"{r}=={pins[normalize(r)]}" for r in RUNTIME_REQUIREMENTS),
    ]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def copy_sources(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for package, source in SOURCES.items():
        destination = target / package
        if destination.exists():
            raise SystemExit(f"a dependency installed a top-level {package!r}, which clashes with ours")
        shutil.copytree(REPO / source, destination, ignore=ignore)


def prune(target: Path) -> None:
    """Drop what a function never uses: console scripts and stray byte code of another Python."""
    shutil.rmtree(target / "bin", ignore_errors=True)
    for cache in sorted(target.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)


def compile_bytecode(target: Path) -> None:
    ok = compileall.compile_dir(str(target), quiet=1, workers=0,
                                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    if not ok:
        raise SystemExit("byte-compiling the build directory failed")


def write_zip(source: Path, output: Path) -> tuple[int, int]:
    """Zip ``source`` reproducibly; return (zip size, unzipped size)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    unzipped = 0
    files = sorted(p for p in source.rglob("*") if p.is_file())
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(source).as_posix(), date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16  # readable by the function's user
            data = path.read_bytes()
            unzipped += len(data)
            archive.writestr(info, data, compresslevel=9)
    return output.stat().st_size, unzipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=sorted(PLATFORMS), default=DEFAULT_ARCH,
                        help="instruction set of the functions (Terraform's lambda_architecture)")
    parser.add_argument("--lock", type=Path, default=REPO / "requirements.lock")
    parser.add_argument("--build-dir", type=Path, default=REPO / "build" / "lambda",
                        help="staging directory (emptied first)")
    parser.add_argument("--output", type=Path, default=REPO / "build" / "lambda.zip")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help=f"byte-compile (default: when this interpreter is Python {PYTHON_VERSION})")
    args = parser.parse_args(argv)

    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    compile_pyc = running == PYTHON_VERSION if args.compile is None else args.compile
    if compile_pyc and running != PYTHON_VERSION:
        raise SystemExit(f"--compile needs Python {PYTHON_VERSION}, this is {running}")

    build_dir = args.build_dir.resolve()
    if build_dir in (REPO, REPO.parent) or build_dir == Path(build_dir.anchor):
        raise SystemExit(f"refusing to empty {build_dir}")
    shutil.rmtree(build_dir, ignore_errors=True)
    package_dir = build_dir / "package"
    package_dir.mkdir(parents=True)

    install_dependencies(package_dir, args.lock, args.arch, PYTHON_VERSION, build_dir)
    prune(package_dir)
    copy_sources(package_dir)
    if compile_pyc:
        compile_bytecode(package_dir)

    output = args.output.resolve()
    if output.exists():
        os.remove(output)
    zipped, unzipped = write_zip(package_dir, output)
    print(f"wrote {output}: {zipped / 2**20:.1f} MB ({unzipped / 2**20:.1f} MB unzipped), "
          f"{args.arch}, Python {PYTHON_VERSION}, byte code {'compiled' if compile_pyc else 'not compiled'}")
    if zipped > MAX_ZIP_BYTES:
        print(f"warning: above the {MAX_ZIP_BYTES // 2**20} MB direct upload limit; upload it to S3 "
              "and point the functions at it instead", file=sys.stderr)
    if unzipped > MAX_UNZIPPED_BYTES:
        raise SystemExit(f"the code is above Lambda's {MAX_UNZIPPED_BYTES // 2**20} MB unzipped limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
