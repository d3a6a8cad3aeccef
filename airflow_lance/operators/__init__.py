"""Airflow operators of the Lance provider."""
