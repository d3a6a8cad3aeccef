"""Ready-made Airflow task groups for Lance datasets (see :mod:`airflow_lance.task_groups.maintenance`)."""
