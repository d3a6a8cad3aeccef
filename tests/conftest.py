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


_CLASS_CACHE: dict = {}  # spark_class_cache's state: the base options, the archive awaited


@pytest.fixture(scope="session", autouse=True)
def spark_class_cache(request: pytest.FixtureRequest):
    """Sessions that start Spark JVMs share one class-data archive (tests/spark_class_cache.py):
    every spark-submit after it starts in about half the time. Sessions of core tests only skip it.
    Where it is missing it is built in the background (by one process per machine) while tests
    run; :func:`spark_class_cache_ready` hands it to the spark-submits started once it exists."""
    import os
    import pathlib

    from spark_class_cache import archive_path, java_options, spark_submit_binary, start_build

    tests = pathlib.Path(__file__).resolve().parent
    jvm_free = {tests / "core", tests / "interop", tests / "object_stores"}
    if all(jvm_free.intersection(pathlib.Path(str(item.path)).parents) for item in request.session.items):
        yield
        return
    spark_submit = spark_submit_binary()
    if spark_submit is None:
        yield
        return
    base = os.environ.get("SPARK_SUBMIT_OPTS")
    archive = archive_path(spark_submit)
    builder = None
    if not archive.is_file():
        builder = start_build(spark_submit)
        _CLASS_CACHE.update(base=base, awaited=archive)
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [base, java_options(archive if archive.is_file()
                                                                                 else None)]))
    yield
    _CLASS_CACHE.clear()
    if builder is not None:
        try:  # finish it for the next session (a short session may end before it does)
            builder.wait(timeout=300)
        except Exception:
            builder.kill()
            builder.wait()


@pytest.fixture(autouse=True)
def spark_class_cache_ready() -> None:
    """Once the archive built in the background exists, later spark-submits start with it."""
    awaited = _CLASS_CACHE.get("awaited")
    if awaited is not None and awaited.is_file():
        import os

        from spark_class_cache import java_options

        os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [_CLASS_CACHE["base"], java_options(awaited)]))
        _CLASS_CACHE.pop("awaited")


@pytest.fixture(params=["numpy", "numba"])
def loops(request, monkeypatch) -> str:
    """The 2.1+ decoder's loops for this test: numpy, or the compiled kernels (the ``fast`` extra,
    installed for the tests), used for inputs of every size."""
    from airflow_lance.core.file.v21 import kernels

    monkeypatch.setenv(kernels.ENV, request.param)
    monkeypatch.setattr(kernels, "MIN_VALUES", 0)
    return request.param


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
