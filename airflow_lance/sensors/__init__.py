"""Airflow sensors of the Lance provider."""
