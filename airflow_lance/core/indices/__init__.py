"""Indices: the manifest's index section, scalar index files in pylance 14's format, and the
operations on them (one module each): ``list_indices``/``describe_indices`` (:mod:`.describe`),
``create_scalar_index`` (:mod:`.create`, files by :mod:`.btree` and :mod:`.bitmap`),
``create_index`` (:mod:`.vector`: IVF_FLAT/IVF_PQ, files by :mod:`.ivf`, :mod:`.pq`, :mod:`.kmeans`),
``drop_index`` (:mod:`.drop`), ``optimize_indices`` (:mod:`.optimize`); compaction remaps
scalar indices with :mod:`.remap`."""

from airflow_lance.core.indices.create import create_scalar_index
from airflow_lance.core.indices.describe import (
    IndexDescription,
    IndexSegmentDescription,
    describe_indices,
    list_indices,
)
from airflow_lance.core.indices.drop import drop_index
from airflow_lance.core.indices.optimize import optimize_indices, unindexed_rows
from airflow_lance.core.indices.vector import create_index

__all__ = [
    "IndexDescription",
    "IndexSegmentDescription",
    "create_index",
    "create_scalar_index",
    "describe_indices",
    "drop_index",
    "list_indices",
    "optimize_indices",
    "unindexed_rows",
]
