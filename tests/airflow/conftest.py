"""Real Airflow for the provider tests: the metadata database (embedded SQLite, migrated once per
session) and a recording wrapper around ``spark-submit``. Helpers live in lance_airflow_testing.py.

The environment itself (AIRFLOW_HOME, DAGs folder, Spark connection) is set in tests/conftest.py
before anything imports Airflow.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lance_airflow_testing import SparkSubmitSpy


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> None:
    """``airflow db migrate`` once per session, on the session's own SQLite file."""
    command = [sys.executable, "-m", "airflow", "db", "migrate"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def spark_submit_spy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSubmitSpy]:
    folder = tmp_path_factory.mktemp("spark-submit-spy")
    spy = SparkSubmitSpy(folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        yield spy
