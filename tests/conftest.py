"""Shared pytest setup: the --run-slow switch and small dataset helpers."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run long stress tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="stress test: run with `make stress`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def spark_class_cache(request: pytest.FixtureRequest) -> None:
    """Sessions that start Spark JVMs share one class-data archive (tests/spark_class_cache.py):
    every spark-submit after it starts in about half the time. Sessions of core tests only skip it."""
    import os
    import pathlib

    from spark_class_cache import cached_archive, java_options, spark_submit_binary

    tests = pathlib.Path(__file__).resolve().parent
    jvm_free = {tests / "core", tests / "interop", tests / "object_stores"}
    if all(jvm_free.intersection(pathlib.Path(str(item.path)).parents) for item in request.session.items):
        return
    spark_submit = spark_submit_binary()
    if spark_submit is None:
        return
    archive = cached_archive(spark_submit)
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), java_options(archive)]))


@pytest.fixture
def uri(tmp_path) -> str:
    """A fresh local dataset location."""
    return str(tmp_path / "ds.lance")


# -- Airflow provider tests --------------------------------------------------------------------
# Airflow reads its configuration when first imported, so the environment is set up when this file
# is imported (before any other conftest or test module): a private AIRFLOW_HOME per session
# (embedded SQLite, migrated once by the `airflow_db` fixture of tests/airflow), no example DAGs, a
# DAGs folder with the example and test DAGs (dag.test() needs its DAG in a bundle), local Spark
# through the `spark-submit` of this interpreter's environment, connections from AIRFLOW_CONN_* JSON.


def _airflow_test_environment() -> str:
    import json
    import os
    import pathlib
    import sys
    import tempfile

    home = tempfile.mkdtemp(prefix="airflow-lance-tests-")
    dags = pathlib.Path(home) / "dags"
    dags.mkdir()
    root = pathlib.Path(__file__).resolve().parents[1]
    for source in [*(root / "example_dags").glob("*.py"), *(root / "tests" / "airflow" / "dags").glob("*.py")]:
        (dags / source.name).symlink_to(source)
    bin_dir = os.path.dirname(sys.executable)
    os.environ.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
    })
    return home


_AIRFLOW_HOME = _airflow_test_environment()


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)
