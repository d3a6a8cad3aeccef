"""Compaction with pylance's names: ``compact_files`` and ``Compaction.plan / CompactionTask.execute /
Compaction.commit`` (see :mod:`.compaction`)."""

from airflow_lance.core.optimize.compaction import Compaction, DatasetOptimizer, compact_files
from airflow_lance.core.optimize.options import CompactionOptions
from airflow_lance.core.optimize.planner import CompactionPlan
from airflow_lance.core.optimize.results import CompactionMetrics, RewriteResult
from airflow_lance.core.optimize.task import CompactionTask

__all__ = [
    "Compaction",
    "CompactionMetrics",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionTask",
    "DatasetOptimizer",
    "RewriteResult",
    "compact_files",
]
