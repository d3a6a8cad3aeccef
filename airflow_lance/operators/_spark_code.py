"""Shipping the Lance core to Spark: the code zip for ``--py-files`` and the job launcher.

The zip holds ``airflow_lance/__init__.py``, ``airflow_lance/core`` and
``airflow_lance/spark`` (no Airflow code) and the list of packages the executors need
(derived from the package's metadata, :mod:`airflow_lance.spark.environment`; the job checks
it on the executors before writing). Zip entries come first on the job's ``sys.path``, so
the shipped code is the code that runs, even where another version is installed.
"""

from __future__ import annotations

import json
import os
import pathlib
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
        archive.write(root / "__init__.py", "airflow_lance/__init__.py")
        for package in SHIPPED_PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                if "__pycache__" not in path.parts:
                    archive.write(path, f"airflow_lance/{path.relative_to(root).as_posix()}")
        # what the job checks on its executors before writing (airflow_lance.spark.environment)
        archive.writestr(f"airflow_lance/spark/{REQUIREMENTS_FILE}", json.dumps(executor_requirements(), indent=1))
    return target


def write_launcher(directory: str | os.PathLike[str]) -> pathlib.Path:
    """Write the spark-submit application file (it only calls the job in the zip)."""
    target = pathlib.Path(directory) / LAUNCHER_NAME
    target.write_text(_LAUNCHER)
    return target
