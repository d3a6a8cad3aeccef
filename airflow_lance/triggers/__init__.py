"""Airflow triggers of the Lance provider."""
