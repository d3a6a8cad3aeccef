"""``LanceCreateIndexOperator``: build a scalar or vector index, in the worker or on Spark, and commit it once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import airflow_lance.core as lance
from airflow_lance.operators._dml import LanceDmlOperator, LanceLocalOrSparkOperator, Planned
from airflow_lance.operators._spark_submit import (
    LanceStagedResultError,
    SparkJobRunner,
    reusable_task_result,
)
from airflow_lance.spark.spec import staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec, split_evenly

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: the vector build's parameters (pylance's ``create_index`` arguments)
VECTOR_ARGS = ("metric", "num_partitions", "num_sub_vectors", "target_partition_size", "sample_rate", "max_iters",
               "num_bits")


def index_summary(index: Any, index_type: str, column: str) -> dict[str, Any]:
    """The index's entries of the operator's summary."""
    return {"index_name": index.name, "index_uuid": lance.index_uuid(index), "index_type": index_type,
            "column": column}


class LanceCreateIndexOperator(LanceLocalOrSparkOperator):
    """Pylance's ``create_scalar_index`` / ``create_index`` as one idempotent ``CreateIndex`` commit.

    Scalar (``BTREE``, ``BITMAP``, ``LABEL_LIST``) and vector (``IVF_FLAT``, ``IVF_PQ``; metric
    ``L2``, ``cosine`` or ``dot``) indices, in pylance 14's format. ``mode="local"`` builds the
    index in the worker (the core's build); ``mode="spark"`` on Spark executors, one Spark task per
    fragment (or per group of fragments, ``num_tasks``): for a scalar index each task sorts its
    fragments' values into a run and one Spark task merges the runs and writes the files; for a vector
    index the driver trains the IVF centroids (and PQ codebooks) on a uniform sample the tasks drew,
    the tasks assign and encode their vectors and one Spark task writes the files. Either way the
    worker commits one ``CreateIndex`` at the version read (it replaces the index of the same name
    with ``replace``); a concurrent commit is handled as pylance's create does (an index of the
    same name committed meanwhile makes it fail; appends are fine: their rows stay unindexed).

    Bad input fails the task before anything is written: an unknown or unsupported index type
    (``UnsupportedFeatureError``), a missing column (``ColumnNotFoundError``), a column of the
    wrong type (``InvalidTypeError``), a taken name without ``replace`` (``IndexExistsError``),
    vector parameters on a scalar index (``InvalidInputError``). A retry after the commit landed
    commits nothing; a retry after a Spark job that finished but whose commit did not land commits
    the staged result (the job does not run again); a failed Spark job commits nothing.

    :param uri: the dataset. (templated)
    :param column: the indexed column. (templated)
    :param index_type: ``BTREE``, ``BITMAP``, ``LABEL_LIST``, ``IVF_FLAT`` or ``IVF_PQ``. (templated)
    :param name: the index's name (default ``{column}_idx``, pylance's). (templated)
    :param replace: replace an index of that name on the column (default False: IndexExistsError).
    :param train: pylance's ``train``: False commits its empty index (no rows indexed; a later
        ``optimize_indices`` builds it), in the worker whatever the ``mode`` (no Spark job).
    :param metric: vector indices: ``L2`` (default), ``cosine`` or ``dot``. (templated)
    :param num_partitions, num_sub_vectors, target_partition_size, sample_rate, max_iters, num_bits: vector
        indices, pylance's ``create_index`` arguments (None: pylance's defaults; ``num_bits`` 8 or 4).
    :param mode: ``local`` or ``spark``. (templated)
    :param num_tasks: Spark tasks (mode ``spark``; default one per fragment).
    :param conflict_retries, idempotency_key, commit_message, staging_uri, lance_conn_id,
        spark_conn_id, conf, py_files, spark_binary, spark_submit_kwargs, spark_log_level,
        python_env_archive: as for :class:`~airflow_lance.operators.update.LanceUpdateOperator`.

    Returns ``{"uri", "version", "read_version", "num_indexed_rows", "mode", "index_name",
    "index_uuid", "index_type", "column"}`` and sets it as the extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = (*LanceDmlOperator.template_fields, "column", "index_type", "name", "metric",
                                      "mode")
    template_fields_renderers: ClassVar[dict[str, str]] = {"conf": "json"}
    count_names = ("num_indexed_rows",)
    what = "create index"

    def __init__(self, *, uri: str, column: str, index_type: str, name: str | None = None, replace: bool = False,
                 metric: str | None = None, num_partitions: int | None = None, num_sub_vectors: int | None = None,
                 target_partition_size: int | None = None, sample_rate: int | None = None,
                 max_iters: int | None = None, num_bits: int | None = None, train: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(uri=uri, **kwargs)
        self.column = column
        self.index_type = index_type
        self.name = name
        self.replace = replace
        self.metric = metric
        self.num_partitions = num_partitions
        self.num_sub_vectors = num_sub_vectors
        self.target_partition_size = target_partition_size
        self.sample_rate = sample_rate
        self.max_iters = max_iters
        self.num_bits = num_bits
        self.train = train

    def index_params(self) -> dict[str, Any]:
        """The request: the core's ``check_index`` arguments (and the Spark job's parameters)."""
        return {"column": self.column, "index_type": self.index_type, "name": self.name,
                "replace": bool(self.replace), "train": self.train, **{k: getattr(self, k) for k in VECTOR_ARGS}}

    def check(self) -> None:
        super().check()
        if not isinstance(self.replace, bool):
            raise lance.InvalidTypeError(f"replace must be a bool, not {type(self.replace).__name__}")
        if not isinstance(self.train, bool):
            raise lance.InvalidTypeError(f"train must be a bool, not {type(self.train).__name__}")

    def describe(self) -> str:
        return f"{self.index_type} index on {self.column!r} ({self.mode})"

    def details(self) -> dict[str, Any]:
        return {"mode": self.mode, "column": self.column}

    def plan(self, ds: lance.LanceDataset, key: str, context: Context) -> Planned:
        checked = lance.check_index(ds, **self.index_params())  # the core's typed errors, nothing written
        # pylance 14 commits an empty index (train=False; a vector index on too few rows): no Spark job for that
        if self.mode == "local" or not ds.get_fragments() or lance.builds_empty_index(ds, checked):
            index, rows = lance.build_index_uncommitted(ds, checked)
            staged = None
        else:
            index, rows, staged = self._build_on_spark(ds, checked, key)
        operation = lance.LanceOperation.CreateIndex(new_indices=[index], removed_indices=checked.removed)
        return Planned(operation, {"num_indexed_rows": rows}, index_summary(index, checked.index_type, checked.column),
                       staged=staged)

    def _build_on_spark(self, ds: lance.LanceDataset, checked: lance.CheckedIndex, key: str
                        ) -> tuple[Any, int, tuple[str, str]]:
        """The index the Spark job built (or the one an earlier try staged for the same job)."""
        ids = [f.fragment_id for f in ds.get_fragments()]
        options = self.hook.storage_options
        root, name = staging_location(ds.uri, f"create_index/{key}", self.staging_uri)
        spec = TaskJobSpec(kind="create_index", uri=ds.uri,
                           tasks=tuple(tuple(g) for g in split_evenly(ids, self.num_tasks)),
                           staging_root=root, staging_name=name, storage_options=options,
                           params={"read_version": ds.version, **self.index_params()})
        what = f"the Spark create_index job for {ds.uri}"
        staged = reusable_task_result(spec, lambda result: ())
        if staged is not None and lance.missing_index_files(ds, _index_of(staged)):
            self.log.warning("Not reusing the index an earlier try staged: its files are missing; running the "
                             "Spark job again")
            staged = None
        if staged is not None:
            self.log.info("Reusing the index %s that an earlier try of this task built on Spark (the job did "
                          "not run again)", staged.info.get("name"))
        else:
            runner: SparkJobRunner = self.spark_runner()
            runner.run(spec.to_json(), f"lance-create-index-{spec.digest()[:12]}.json", what)
            staged = TaskJobResult.load(root, name, options)
            if staged is None or staged.spec_digest != spec.digest():
                raise LanceStagedResultError(f"{what} finished without staging its result")
        index = _index_of(staged)
        if index.name != checked.name or staged.info.get("index_type") != checked.index_type:
            raise LanceStagedResultError(f"{what} built index {index.name!r} ({staged.info.get('index_type')}), "
                                         f"not {checked.name!r} ({checked.index_type})")
        return index, int(staged.info["num_indexed_rows"]), (root, name)

    def _landed(self, uri: str, key: str, context: Context) -> dict[str, Any] | None:
        summary = super()._landed(uri, key, context)
        if summary is None or "index_uuid" in summary:
            return summary
        txn = self.hook.get_dataset(uri, summary["version"]).read_transaction()
        new = list(getattr(txn.operation, "new_indices", ())) if txn is not None else []
        if new:
            summary.update(index_summary(new[0], str(self.index_type).upper(), self.column))
        return summary


def _index_of(staged: TaskJobResult) -> Any:
    try:
        return lance.decode_index(staged.info["index"])
    except (KeyError, lance.InvalidInputError) as exc:
        raise LanceStagedResultError(f"the staged create_index result holds no index: {exc!r}") from None
