"""The PySpark jobs (write, tasks) and the Lance Spark source (:func:`read_lance`): run on Spark
drivers and executors.

Imports ``airflow_lance.core`` and PySpark only, never Airflow, so a cluster needs
nothing but the core's dependencies (the operator ships this code as a zip through
``--py-files``, with the list of them that the job checks on the executors:
:mod:`airflow_lance.spark.environment`).
"""

from airflow_lance.spark.read import read_lance

__all__ = ["read_lance"]
