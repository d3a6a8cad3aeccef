"""Index builds on Spark: the ``create_index`` task job (scalar and vector indices).

Each Spark task gets a group of fragment ids of the dataset at the job's read version (the
groups are contiguous, in fragment order, so the rows come back in the order a local build
scans them). The driver checks the column and the parameters as the core's create does
(nothing is written before), and:

* scalar (BTREE, BITMAP, LABEL_LIST): each task reads its fragments' column with the row
  addresses (or stable row ids) the index holds and sorts them into one run (index order:
  nulls first, then by value, then by address) and stages the run; then ONE Spark task
  (:func:`merge_runs`, a second one-task job) reads the runs, merges them (a stable merge of the
  sorted runs, :func:`airflow_lance.core.indices.sort.merge_order`, not a sort) and writes the
  index files (:func:`airflow_lance.core.indices.create.index_files`);
* vector (IVF_FLAT, IVF_PQ): a first pass counts each task's finite non-null vectors and draws
  a uniform sample of them; the driver draws the training sample from those (uniform over all
  vectors: a multivariate hypergeometric split by task), trains the IVF centroids and PQ
  codebooks (:func:`airflow_lance.core.indices.ivf.train`) and shares the model; a second pass
  assigns and encodes each task's vectors (:func:`~airflow_lance.core.indices.ivf.encode`) and
  stages the partition ids, row ids and codes (or vectors); then ONE Spark task
  (:func:`assemble_vectors`) reads them, lays out the files
  (:func:`~airflow_lance.core.indices.ivf.assemble`) and writes them.

A task's part (sorted run or encoded vectors) is staged as one Arrow IPC file in the dataset's
store, ``_airflow_staging/create_index-<job uuid>-part-<task>.arrow``, not sent back through
Spark: a task result travels through the JVMs (two more copies) and all of them together are
bounded by ``spark.driver.maxResultSize`` (1 GiB by default: 2M vectors of 128 float32). The
data never reaches the driver: the merge task returns only the index's ``IndexMetadata``, the
rows of each part and where it ran (:func:`~airflow_lance.spark.distributed.task_context`). The
driver deletes the parts after the merge task (also when a task or the merge task fails: then
nothing is staged, and the operator commits nothing).

The files go under a new ``_indices/<uuid>/``; the staged result holds one
``{"num_rows": n}`` per task and ``info``: the index's ``IndexMetadata`` (base64 protobuf),
its name and type, the rows indexed, and ``merged_in`` (the merge task's stage, partition,
attempt and pid) with ``driver_pid``. The operator commits one ``CreateIndex`` at the read
version. Nothing is committed here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_lance.core import dataset
from airflow_lance.core.indices import ivf
from airflow_lance.core.indices.create import index_files, read_column, write_index
from airflow_lance.core.indices.plan import build_index_uncommitted, check_params, decode_index, encode_index
from airflow_lance.core.indices.sort import merge_order, sort_order
from airflow_lance.core.indices.vector import (
    cap_partitions,
    check_training,
    empty_vector_index,
    read_vectors,
    trains_nothing,
    write_vector_index,
)
from airflow_lance.spark.distributed import from_ipc, map_tasks, share, task_context, to_ipc, unshare
from airflow_lance.spark.spec import STAGING_DIR
from airflow_lance.spark.task_spec import TaskJobSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _parts_dir() -> str:
    """A new name prefix (in the dataset's staging folder) for one job's staged parts (files beside
    the staged result, so no folder is left behind; removed after the merge)."""
    return f"{STAGING_DIR}/create_index-{uuid.uuid4().hex}"


def _open(uri: str, storage_options: Mapping[str, str], params: Mapping[str, Any]) -> Any:
    return dataset(uri, int(params["read_version"]), storage_options=dict(storage_options))


# -- scalar ---------------------------------------------------------------------------------------
def part_path(parts: str, task: int) -> str:
    """Where task ``task`` of the job stages its part (a path in the dataset's store)."""
    return f"{parts}-part-{task:05d}.arrow"


def _stage(ds: Any, path: str, table: pa.Table) -> int:
    ds.store.write(path, to_ipc(table))
    return table.num_rows


def _staged_parts(ds: Any, parts: str, tasks: int) -> list[pa.Table]:
    return [from_ipc(ds.store.read(part_path(parts, task))) for task in range(tasks)]


def _remove_parts(ds: Any, parts: str, tasks: int) -> None:
    for task in range(tasks):  # one file per task
        with contextlib.suppress(Exception):  # best effort: a part a failed task never wrote
            ds.store.delete(part_path(parts, task))


def sorted_run(task: tuple[int, Sequence[int]], *, uri: str, storage_options: Mapping[str, str],
               params: Mapping[str, Any], index_type: str, parts: str) -> int:
    """Executor side: stage the indexed values and row addresses of the task's fragments in index
    order (LABEL_LIST: in scan order, its lists are not ordered) as Arrow IPC at
    :func:`part_path`; the rows staged."""
    number, fragment_ids = task
    ds = _open(uri, storage_options, params)
    values, addrs, _ = read_column(ds, params["column"], index_type, list(fragment_ids))
    if index_type != "LABEL_LIST" and len(addrs):
        order = sort_order(values, addrs)
        values, addrs = values.take(pa.array(order)), addrs[order]
    return _stage(ds, part_path(parts, number), pa.table({"values": values, "addrs": pa.array(addrs, pa.uint64())}))


def merge_runs(_: int, *, uri: str, storage_options: Mapping[str, str], params: Mapping[str, Any],
               index_type: str, field_id: int, name: str, parts: str, tasks: int,
               fragments: Sequence[int]) -> dict[str, Any]:
    """Executor side, the one merge task: read the staged sorted runs, merge them (a stable merge,
    :func:`~airflow_lance.core.indices.sort.merge_order`; LABEL_LIST keeps scan order) and write the
    index files under a new ``_indices/<uuid>/``; only metadata goes back (:func:`_merged`)."""
    ds = _open(uri, storage_options, params)
    runs = _staged_parts(ds, parts, tasks)
    merged = pa.concat_tables(runs).combine_chunks()
    values = merged.column("values").combine_chunks()
    addrs = merged.column("addrs").to_numpy().astype(np.uint64, copy=False)
    order = None if index_type == "LABEL_LIST" else merge_order(values, addrs, [t.num_rows for t in runs])
    files, type_url, version = index_files(ds, index_type, values, addrs, order)
    index = write_index(ds, field_id, name, files, type_url, version, [int(f) for f in fragments])
    return _merged(index, runs)


def _merged(index: Any, parts: Sequence[pa.Table]) -> dict[str, Any]:
    """What the merge task returns: the index's ``IndexMetadata`` (base64), the rows of each part and
    where it ran (the Spark task, its Python worker's pid)."""
    return {"index": encode_index(index), "num_rows": [t.num_rows for t in parts], "merged_in": task_context()}


def _in_one_task(spark: SparkSession, merge: Any, parts: int) -> dict[str, Any]:
    """``merge`` (:func:`merge_runs`, :func:`assemble_vectors`) in one Spark task; its result. Prints
    where it ran."""
    result = map_tasks(spark, [0], merge)[0]
    where = result["merged_in"]
    print(f"airflow-lance create_index: merged {sum(result['num_rows'])} rows of {parts} parts in Spark task "
          f"{where['partition']} of stage {where['stage']} (attempt {where['attempt']}, pid {where['pid']}; "
          f"driver pid {os.getpid()})", flush=True)
    return result


def build_scalar(spark: SparkSession, spec: TaskJobSpec, ds: Any, index_type: str, field_id: int,
                 name: str) -> tuple[list[Any], Any, int, dict[str, Any]]:
    parts = _parts_dir()
    options, params = dict(spec.storage_options), dict(spec.params)
    tasks = [list(t) for t in spec.tasks]
    run = functools.partial(sorted_run, uri=spec.uri, storage_options=options, params=params,
                            index_type=index_type, parts=parts)
    merge = functools.partial(merge_runs, uri=spec.uri, storage_options=options, params=params,
                              index_type=index_type, field_id=field_id, name=name, parts=parts, tasks=len(tasks),
                              fragments=[int(f) for task in tasks for f in task])
    try:
        map_tasks(spark, list(enumerate(tasks)), run)
        result = _in_one_task(spark, merge, len(tasks))
    finally:
        _remove_parts(ds, parts, len(tasks))
    return _results(result), decode_index(result["index"]), sum(result["num_rows"]), result["merged_in"]


def _results(merged: Mapping[str, Any]) -> list[Any]:
    """The staged result's per-task entries: the rows of each task's part."""
    return [{"num_rows": int(n)} for n in merged["num_rows"]]


# -- vector ---------------------------------------------------------------------------------------
def count_and_sample(fragment_ids: Sequence[int], *, uri: str, storage_options: Mapping[str, str],
                     params: Mapping[str, Any], dim: int, size: int, seed: int | None) -> tuple[int, bytes]:
    """Executor side, first pass: (finite non-null vectors in ``fragment_ids``, a uniform sample of at
    most ``size`` of them as row-major bytes in the compute dtype: float64 for float64 vectors, else float32)."""
    ds = _open(uri, storage_options, params)
    vectors, _, _ = read_vectors(ds, params["column"], dim, list(fragment_ids))
    count = len(vectors)
    rng = np.random.default_rng(None if seed is None else [int(seed), *[int(f) for f in fragment_ids[:1]]])
    if count > size:
        vectors = vectors[np.sort(rng.choice(count, size=size, replace=False))]
    return count, np.ascontiguousarray(vectors).tobytes()


def encode_vectors(task: tuple[int, Sequence[int]], *, uri: str, storage_options: Mapping[str, str],
                   params: Mapping[str, Any], dim: int, model: Any, parts: str) -> float:
    """Executor side, second pass: the vectors of the task's fragments assigned and encoded against
    the shared model, staged as Arrow IPC of partition ids, row ids and codes or vectors at
    :func:`part_path`; their loss."""
    number, fragment_ids = task
    trained: ivf.IvfModel = model.value
    ds = _open(uri, storage_options, params)
    vectors, row_ids, _ = read_vectors(ds, params["column"], dim, list(fragment_ids))
    part = ivf.encode(ivf.prepare(vectors, trained.params.metric, trained.params.value_type), trained)
    width = part.values.shape[1] if part.values.ndim == 2 else dim
    value_type = pa.from_numpy_dtype(part.values.dtype) if trained.codebooks is None else pa.uint8()
    values = pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(part.values).reshape(-1), value_type),
                                               width)
    _stage(ds, part_path(parts, number), pa.table({"partition": pa.array(part.labels.astype(np.uint32)),
                                                   "row_id": pa.array(row_ids, pa.uint64()), "values": values}))
    return part.loss


def assemble_vectors(_: int, *, uri: str, storage_options: Mapping[str, str], params: Mapping[str, Any],
                     field_id: int, name: str, index: ivf.VectorIndexParams, model: Any, loss: float, parts: str,
                     tasks: int, fragments: Sequence[int]) -> dict[str, Any]:
    """Executor side, the one assembly task: read the staged encoded vectors, lay out the index files
    (:func:`~airflow_lance.core.indices.ivf.assemble`) and write them under a new ``_indices/<uuid>/``;
    only metadata goes back (:func:`_merged`)."""
    ds = _open(uri, storage_options, params)
    staged = _staged_parts(ds, parts, tasks)
    table = pa.concat_tables(staged).combine_chunks()
    width = table.schema.field("values").type.list_size
    values = table.column("values").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    part = ivf.EncodedPart(table.column("partition").to_numpy().astype(np.int64), loss, values)
    files = ivf.assemble(model.value, part, table.column("row_id").to_numpy())
    return _merged(write_vector_index(ds, field_id, name, index, files, list(fragments)), staged)


def training_sample(counts: Sequence[int], samples: Sequence[np.ndarray], size: int,
                    rng: np.random.Generator) -> np.ndarray:
    """A uniform sample of ``size`` of all vectors (at most all of them) from the tasks' uniform samples:
    how many come from each task is multivariate hypergeometric in the tasks' counts."""
    total = int(sum(counts))
    take = rng.multivariate_hypergeometric(np.asarray(counts, np.int64), min(size, total)) if total else counts
    parts = [sample[np.sort(rng.choice(len(sample), size=int(n), replace=False))] if n < len(sample) else sample
             for sample, n in zip(samples, take) if n]
    return np.concatenate(parts) if parts else \
        np.zeros((0, samples[0].shape[1] if samples else 0), samples[0].dtype if samples else np.float32)


def build_vector(spark: SparkSession, spec: TaskJobSpec, ds: Any, params: ivf.VectorIndexParams, field_id: int,
                 dim: int, name: str) -> tuple[list[Any], Any, int, dict[str, Any] | None]:
    seed = spec.params.get("seed")
    rng = np.random.default_rng(seed)
    tasks = [list(t) for t in spec.tasks]
    options = dict(spec.storage_options)
    # rows the training needs: IVF samples num_partitions * sample_rate rows, PQ 256 * 2**num_bits (residuals)
    size = params.num_partitions * params.sample_rate
    if params.index_type == "IVF_PQ":
        size = max(size, 256 * 2 ** params.num_bits)
    first = map_tasks(spark, tasks, functools.partial(count_and_sample, uri=spec.uri, storage_options=options,
                                                      params=dict(spec.params), dim=dim, size=size, seed=seed))
    counts = [count for count, _ in first]
    dtype = ivf.compute_dtype(params.value_type)
    samples = [np.frombuffer(data, dtype).reshape(-1, dim) for _, data in first]
    if trains_nothing(params, ds.count_rows(), int(sum(counts))):  # pylance 14's empty index: no files
        return [{"num_rows": 0} for _ in tasks], empty_vector_index(ds, field_id, name, params), 0, None
    check_training(params)
    params = cap_partitions(params, int(sum(counts)))
    sample = ivf.prepare(training_sample(counts, samples, size, rng), params.metric, params.value_type)
    model, _, _ = ivf.train(sample, params, rng)
    shared = share(spark, model)
    staged = _parts_dir()
    try:
        losses = map_tasks(spark, list(enumerate(tasks)),
                           functools.partial(encode_vectors, uri=spec.uri, storage_options=options,
                                             params=dict(spec.params), dim=dim, model=shared, parts=staged))
        assemble = functools.partial(assemble_vectors, uri=spec.uri, storage_options=options,
                                     params=dict(spec.params), field_id=field_id, name=name, index=params,
                                     model=shared, loss=float(sum(losses)), parts=staged, tasks=len(tasks),
                                     fragments=[int(f) for task in tasks for f in task])
        result = _in_one_task(spark, assemble, len(tasks))
    finally:
        unshare(shared)
        _remove_parts(ds, staged, len(tasks))
    return _results(result), decode_index(result["index"]), sum(result["num_rows"]), result["merged_in"]


def run_create_index(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    """Build the index over the tasks' fragments: files written, nothing committed."""
    ds = _open(spec.uri, spec.storage_options, spec.params)
    checked = check_params(ds, spec.params)
    if not checked.train:  # pylance 14's empty index: nothing to run on the executors
        index, rows = build_index_uncommitted(ds, checked)
        results: list[Any] = []
        merged_in = None
    elif checked.vector is not None:
        assert checked.dim is not None
        results, index, rows, merged_in = build_vector(spark, spec, ds, checked.vector, checked.field_id,
                                                       checked.dim, checked.name)
    else:
        results, index, rows, merged_in = build_scalar(spark, spec, ds, checked.index_type, checked.field_id,
                                                       checked.name)
    info = {"index": encode_index(index), "name": checked.name, "index_type": checked.index_type,
            "num_indexed_rows": int(rows)}
    if merged_in is not None:
        info.update(merged_in=merged_in, driver_pid=os.getpid())
    return results, info
