"""The PySpark jobs (write, tasks) and the Lance Spark source (:func:`read_lance`): run on Spark
drivers and executors.

Imports ``airflow_lance.core`` and PySpark only, never Airflow, so a cluster needs
nothing but the core's dependencies (the operator ships this code as a zip through
``--py-files``, with the list of them that the job checks on the executors:
:mod:`airflow_lance.spark.environment`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_lance.spark.read import read_lance

__all__ = ["read_lance"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the package itself must import on an executor whose Python lacks
    # the core's dependencies, so that the job's environment check (spark/environment.py, run
    # in a task that imports this package) can name what is missing.
    if name == "read_lance":
        from airflow_lance.spark.read import read_lance

        return read_lance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
