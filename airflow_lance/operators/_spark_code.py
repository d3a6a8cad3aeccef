"""Shipping the Lance core to Spark: the code zip for ``--py-files`` and the job launcher.

The zip holds ``airflow_lance/__init__.py``, ``airflow_lance/core`` and
``airflow_lance/spark`` (no Airflow code) and the list of packages the executors need
(derived from the package's metadata, :mod:`airflow_lance.spark.environment`; the job checks
it on the executors before writing). Zip entries come first on the job's ``sys.path``, so
the shipped code is the code that runs, even where another version is installed.

Every module also goes in compiled, as a checked hash-based ``.pyc`` beside its source (PEP 552):
Python caches nothing it imports from a zip, so without them the driver and every executor's
Python worker compiled all of the shipped code again on each import (about 1 s of the 2.5 s
import on a 2-core machine). An interpreter of another Python version, or a source that does not
match its hash, imports the source instead.
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import pathlib
import struct
import zipfile

import airflow_lance
from airflow_lance.spark.environment import REQUIREMENTS_FILE, executor_requirements

SHIPPED_PACKAGES = ("core", "spark")
LAUNCHER_NAME = "airflow_lance_job.py"
_LAUNCHER = '"""Runs airflow_lance.spark.job from the --py-files zip."""\n' \
    "from airflow_lance.spark.job import main\n\nraise SystemExit(main())\n"


def _package_root() -> pathlib.Path:
    return pathlib.Path(airflow_lance.__file__).resolve().parent


def build_code_zip(directory: str | os.PathLike[str]) -> pathlib.Path:
    """Write ``airflow_lance.zip`` (the core and the Spark job) into ``directory``."""
    root = _package_root()
    target = pathlib.Path(directory) / "airflow_lance.zip"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        sources = [root / "__init__.py"] + [path for package in SHIPPED_PACKAGES
                                            for path in sorted((root / package).rglob("*.py"))
                                            if "__pycache__" not in path.parts]
        for path in sources:
            name = f"airflow_lance/{path.relative_to(root).as_posix()}"
            archive.write(path, name)
            archive.writestr(name + "c", _compiled(path, name))
        # what the job checks on its executors before writing (airflow_lance.spark.environment)
        archive.writestr(f"airflow_lance/spark/{REQUIREMENTS_FILE}", json.dumps(executor_requirements(), indent=1))
    return target


#: (source path, size, mtime) -> .pyc bytes: a process building several zips compiles once
_COMPILED: dict[tuple[str, int, int], bytes] = {}


def _compiled(path: pathlib.Path, name: str) -> bytes:
    """The checked hash-based ``.pyc`` of ``path`` (its code named ``name``, the path in the zip:
    tracebacks show it, and the zip's importer gives their source lines)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _COMPILED:
        source = path.read_bytes()
        code = compile(source, name, "exec", dont_inherit=True)
        # PEP 552 header: magic, flags (hash-based | check source), the source's hash
        _COMPILED[key] = (importlib.util.MAGIC_NUMBER + struct.pack("<I", 0b11)
                          + importlib.util.source_hash(source) + marshal.dumps(code))
    return _COMPILED[key]


def write_launcher(directory: str | os.PathLike[str]) -> pathlib.Path:
    """Write the spark-submit application file (it only calls the job in the zip)."""
    target = pathlib.Path(directory) / LAUNCHER_NAME
    target.write_text(_LAUNCHER)
    return target
