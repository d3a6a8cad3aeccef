"""airflow-lance: an Apache Airflow provider for Lance datasets.

This module must stay free of Airflow and Spark imports: Spark executors import
``airflow_lance.core`` through it.
"""

__version__ = "0.1.0"
