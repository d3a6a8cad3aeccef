"""Build a packed Python environment for Spark executors (``--archives env.tar.gz#env``).

    python -m airflow_lance.spark.pack_env env.tar.gz                  # what this machine runs
    python -m airflow_lance.spark.pack_env env.tar.gz s3fs==2026.9.0   # plus a store backend
    python -m airflow_lance.spark.pack_env env.tar.gz -r requirements.txt

Creates a virtual environment (``python -m venv``, without pip), installs into it with this
Python's pip (``pip --python``) the packages the shipped Lance code needs, and packs it as a
``.tar.gz`` whose top level is the environment (``bin/python``, ``lib/...``). By default they
are pinned to the versions installed here (:func:`airflow_lance.spark.environment.executor_requirements`,
from the package's own metadata), so executors run what the operator was tested with; ``-r``
installs a requirements file instead; further arguments are added requirements.

Like venv-pack's archives it is relocatable but not self-contained: ``bin/python`` links to the
interpreter it was made from (``--python``, default this one), which must exist at the same
path on every worker (the same image or the same Python install everywhere). Where that does
not hold, use conda-pack or a container image with the packages.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence

from airflow_lance.spark.environment import executor_requirements


def pinned_requirements() -> list[str]:
    """``name==version`` of every package the executors need, as installed here."""
    return [f"{r['distribution']}=={importlib.metadata.version(r['distribution'])}" for r in executor_requirements()]


def base_interpreter(python: str) -> str:
    """The interpreter a virtual environment ``python`` was made from (itself if it is none)."""
    code = ("import sys, os; "
            "print(os.path.join(sys.base_exec_prefix, 'bin', os.path.basename(os.path.realpath(sys.executable))))")
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def pack(output: str | os.PathLike[str], requirements: Sequence[str] = (), requirement_file: str | None = None,
         python: str | None = None) -> pathlib.Path:
    """Build the environment and write it to ``output`` (a ``.tar.gz``); return its path."""
    target = pathlib.Path(output).resolve()
    interpreter = base_interpreter(python or sys.executable)
    with tempfile.TemporaryDirectory(prefix="airflow-lance-env-") as tmp:
        env = pathlib.Path(tmp) / "env"
        subprocess.run([interpreter, "-m", "venv", "--without-pip", str(env)], check=True)
        install = [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install",
                   "--quiet", "--disable-pip-version-check", "--no-warn-script-location"]
        install += ["-r", requirement_file] if requirement_file else pinned_requirements()
        subprocess.run([*install, *requirements], check=True)
        for cache in env.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        partial = target.with_name(target.name + ".partial")
        with tarfile.open(partial, "w:gz") as archive:
            for entry in sorted(env.iterdir()):
                archive.add(entry, arcname=entry.name)
        partial.replace(target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_lance.spark.pack_env", description=__doc__.split("\n")[0])
    parser.add_argument("output", help="the archive to write, e.g. env.tar.gz")
    parser.add_argument("requirements", nargs="*", help="further requirements, e.g. s3fs==2026.9.0")
    parser.add_argument("-r", "--requirement", dest="requirement_file",
                        help="install this requirements file instead of the pinned executor requirements")
    parser.add_argument("--python", help="the interpreter to base the environment on (default: this one)")
    args = parser.parse_args(argv)
    path = pack(args.output, args.requirements, args.requirement_file, args.python)
    print(f"{path} ({path.stat().st_size:,} bytes): ship it with python_env_archive={str(path)!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
