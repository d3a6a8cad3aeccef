"""Airflow hooks of the Lance provider."""
