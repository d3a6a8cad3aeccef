"""Airflow assets for Lance datasets (see :mod:`airflow_lance.assets.lance`)."""
