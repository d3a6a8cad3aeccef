"""The contract between the operators and the Spark *task* job (compaction, Kartothek import).

A task job runs the independent tasks of one core operation on the executors, one Spark
task each, and stages their JSON results; like the write job it never commits. The
operator plans, writes a :class:`TaskJobSpec` into a private file shipped with
``--files`` (storage options never go on a command line), runs the job, loads the
:class:`TaskJobResult` from the staging location and commits once.

Kinds:

* ``compaction``: each task is a ``CompactionTask`` (its JSON form); each result a
  ``RewriteResult`` (JSON). Everything the tasks need is in them and ``uri``.
* ``add_columns``: each task is ``{"fragment_id": n}``; each result the fragment with its new
  data file (``FragmentMetadata`` JSON); ``info["plan"]`` the ``AddColumnsPlan`` to commit
  (:mod:`airflow_lance.spark.add_columns`).
* ``update`` / ``delete``: each task is a list of fragment ids; ``params`` hold the read
  version and ``updates`` + ``where`` (update) or ``predicate`` (delete); each result the
  task's part of the ``Update`` / ``Delete`` (:mod:`airflow_lance.spark.dml_tasks`).
* ``create_index``: each task is a list of fragment ids; ``params`` hold the read version and
  the index's parameters (``column``, ``index_type``, ``name``, ``replace``, ...); each result
  ``{"num_rows": n}``, ``info`` the index written (:mod:`airflow_lance.spark.create_index`).
* ``kartothek_import``: each task is a list of Kartothek partition labels; each result a
  ``PartitionsWritten`` (JSON). The driver plans the import again from ``params`` and
  refuses to write if the source changed since the operator planned it (the plan's
  idempotency key, which hashes the source's metadata file, differs).

The staged result lives at ``<dataset uri>/_airflow_staging/<digest>.json`` (see
:func:`~airflow_lance.spark.spec.staging_location`); a failed job leaves only
unreferenced data files, which version cleanup removes after its grace period.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import pyarrow as pa

from airflow_lance.spark.spec import JobSpecError, StagedResult, require, string_map

TaskJobKind = Literal["compaction", "kartothek_import", "add_columns", "update", "delete", "create_index"]
TASK_SPEC_VERSION = 1
#: The key of a spec document that names a task job (write job specs do not have it).
JOB_KEY = "job"
#: ``params`` a Kartothek import job needs (``source_storage_options`` is a separate, secret field).
KARTOTHEK_PARAMS = ("store_uri", "dataset_uuid", "table", "mode", "partition_columns", "max_rows_per_file",
                    "max_bytes_per_file", "idempotency_key")

#: ``params`` an update / delete job needs
DML_PARAMS = {"update": ("read_version", "updates", "where"), "delete": ("read_version", "predicate")}


@dataclasses.dataclass(frozen=True)
class TaskJobSpec:
    """One Spark task job: what to run on the executors and where to stage the results.

    ``storage_options`` are the Lance dataset's, ``source_storage_options`` (Kartothek
    import only) the source store's; both may hold credentials and are left out of
    :meth:`digest` and of every log line.
    """

    kind: TaskJobKind
    uri: str
    tasks: tuple[Any, ...]
    staging_root: str
    staging_name: str
    storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    source_storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        require(self.kind in get_args(TaskJobKind), f"job must be one of {get_args(TaskJobKind)}, not {self.kind!r}")
        require(isinstance(self.uri, str) and bool(self.uri), "uri must be a non-empty string")
        require(isinstance(self.tasks, tuple) and bool(self.tasks), "tasks must be a non-empty list")
        require(bool(self.staging_root) and bool(self.staging_name), "staging location is missing")
        require(isinstance(self.params, Mapping), "params must be an object")
        if self.kind == "compaction":
            require(all(isinstance(t, Mapping) for t in self.tasks), "compaction tasks must be objects")
        elif self.kind == "add_columns":
            check_add_columns(self.tasks, self.params)
        elif self.kind == "create_index":
            version = self.params.get("read_version")
            require(isinstance(version, int) and version > 0,
                    f"read_version must be a positive integer, not {version!r}")
            require(isinstance(self.params.get("column"), str) and isinstance(self.params.get("index_type"), str),
                    "a create_index job needs params column and index_type")
            require(all(isinstance(t, (list, tuple)) and all(isinstance(i, int) for i in t) for t in self.tasks),
                    "create_index tasks must be lists of fragment ids")
        elif self.kind in DML_PARAMS:
            missing = [name for name in DML_PARAMS[self.kind] if name not in self.params]
            require(not missing, f"a{'n' if self.kind == 'update' else ''} {self.kind} job needs params {missing}")
            require(all(isinstance(t, (list, tuple)) and all(isinstance(i, int) for i in t) for t in self.tasks),
                    f"{self.kind} tasks must be lists of fragment ids")
        else:
            missing = [name for name in KARTOTHEK_PARAMS if name not in self.params]
            require(not missing, f"a Kartothek import job needs params {missing}")
            require(all(isinstance(t, (list, tuple)) and all(isinstance(label, str) for label in t)
                         for t in self.tasks), "Kartothek import tasks must be lists of partition labels")

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_version": TASK_SPEC_VERSION,
            JOB_KEY: self.kind,
            "uri": self.uri,
            "tasks": [list(t) if isinstance(t, tuple) else t for t in self.tasks],
            "staging_root": self.staging_root,
            "staging_name": self.staging_name,
            "storage_options": dict(self.storage_options),
            "params": dict(self.params),
            "source_storage_options": dict(self.source_storage_options),
        }

    def to_json(self) -> str:
        """The spec as JSON (includes storage options: store it privately, never log it)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskJobSpec:
        require(data.get("spec_version") == TASK_SPEC_VERSION,
                 f"task job spec version {data.get('spec_version')!r} is not {TASK_SPEC_VERSION}: "
                 "operator and job differ")
        try:
            tasks = data["tasks"]
            require(isinstance(tasks, list), "tasks must be a list")
            return cls(
                kind=data[JOB_KEY],
                uri=data["uri"],
                tasks=tuple(tuple(t) if isinstance(t, list) else t for t in tasks),
                staging_root=data["staging_root"],
                staging_name=data["staging_name"],
                storage_options=string_map("storage_options", data.get("storage_options") or {}),
                params=data.get("params") or {},
                source_storage_options=string_map("source_storage_options",
                                                   data.get("source_storage_options") or {}),
            )
        except KeyError as exc:
            raise JobSpecError(f"task job spec lacks {exc.args[0]!r}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskJobSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise JobSpecError(f"job spec is not JSON: {exc}") from None
        require(isinstance(data, dict), "job spec must be a JSON object")
        return cls.from_dict(data)

    def digest(self) -> str:
        """Identity of the job (credentials and staging location left out): a retry may reuse
        a staged result only if its digest matches."""
        data = self.to_dict()
        for key in ("storage_options", "source_storage_options", "staging_root", "staging_name"):
            data.pop(key)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def describe(self) -> str:
        """A log-friendly description (no option values)."""
        if self.kind == "compaction":
            return f"{len(self.tasks)} compaction tasks on {self.uri}"
        if self.kind == "add_columns":
            how = (f"{len(self.params['expressions'])} Spark SQL expressions" if self.params.get("expressions")
                   else f"function {self.params.get('function')}")
            return (f"{'backfill' if self.params.get('only_missing') else 'new columns'} by {how} for "
                    f"{len(self.tasks)} fragments of {self.uri} at version {self.params.get('read_version')}")
        if self.kind in DML_PARAMS:
            return (f"{self.kind} of {sum(len(t) for t in self.tasks)} fragments of {self.uri} at version "
                    f"{self.params.get('read_version')} in {len(self.tasks)} Spark tasks")
        if self.kind == "create_index":
            return (f"{self.params.get('index_type')} index on {self.params.get('column')!r} over "
                    f"{sum(len(t) for t in self.tasks)} fragments of {self.uri} at version "
                    f"{self.params.get('read_version')} in {len(self.tasks)} Spark tasks")
        labels = sum(len(t) for t in self.tasks)
        return (f"Kartothek import of {self.params.get('dataset_uuid')!r} table {self.params.get('table')!r} "
                f"({labels} partitions in {len(self.tasks)} Spark tasks) into {self.uri}")


def encode_schema(schema: pa.Schema) -> str:
    """An Arrow schema as base64 text (IPC), for a spec or a staged result."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def decode_schema(text: str) -> pa.Schema:
    """The schema :func:`encode_schema` wrote; JobSpecError if it is malformed."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise JobSpecError(f"schema is malformed: {exc}") from None


def check_add_columns(tasks: Sequence[Any], params: Mapping[str, Any]) -> None:
    """An ``add_columns`` job: ``{"fragment_id": n}`` tasks, a read version, and exactly one of
    ``expressions`` ([name, Spark SQL] pairs, in column order) and ``function`` (``module:function``)."""
    require(all(isinstance(t, Mapping) and isinstance(t.get("fragment_id"), int) for t in tasks),
            "add_columns tasks must be objects with an integer fragment_id")
    version = params.get("read_version")
    require(isinstance(version, int) and version > 0, f"read_version must be a positive integer, not {version!r}")
    expressions, function = params.get("expressions"), params.get("function")
    require((expressions is None) != (function is None), "give exactly one of expressions and function")
    if expressions is not None:  # [name, expression] pairs: JSON objects would lose the columns' order
        require(isinstance(expressions, (list, tuple)) and bool(expressions) and all(
            isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str) and pair[0]
            and isinstance(pair[1], str) and pair[1].strip() for pair in expressions),
            "expressions must be [new column name, Spark SQL expression] pairs")
    else:
        require(isinstance(function, str) and function.count(":") == 1 and all(function.split(":")),
                f"function must look like 'package.module:function', not {function!r}")
    inputs = params.get("input_columns")
    require(inputs is None or (isinstance(inputs, list) and all(isinstance(c, str) for c in inputs)),
            "input_columns must be a list of column names")
    require(params.get("function_input", "arrow") in ("arrow", "pandas"), "function_input must be arrow or pandas")
    if params.get("output_schema") is not None:
        decode_schema(params["output_schema"])


@dataclasses.dataclass(frozen=True)
class TaskJobResult(StagedResult):
    """What a finished task job staged: one JSON result per task, in task order, plus ``info``
    (kind-specific facts, e.g. ``already_imported_version`` of a Kartothek import that the
    driver found already committed)."""

    spec_digest: str
    results: tuple[Any, ...]
    elapsed_seconds: float
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"spec_digest": self.spec_digest, "results": list(self.results),
                           "elapsed_seconds": self.elapsed_seconds, "info": dict(self.info)})

    @classmethod
    def from_json(cls, text: str | bytes) -> TaskJobResult:
        try:
            data = json.loads(text)
            results = data["results"]
            if not isinstance(results, list):
                raise TypeError("results is not a list")
            return cls(str(data["spec_digest"]), tuple(results), float(data["elapsed_seconds"]),
                       dict(data.get("info") or {}))
        except (ValueError, KeyError, TypeError) as exc:
            raise JobSpecError(f"staged task job result is malformed: {exc!r}") from None


def split_evenly(items: Sequence[str], parts: int | None) -> list[list[str]]:
    """``items`` in order, cut into ``parts`` contiguous groups of near-equal size (one item per
    group when ``parts`` is None or larger than the number of items)."""
    if not items:
        return []
    count = len(items) if parts is None else max(1, min(parts, len(items)))
    size, extra = divmod(len(items), count)
    groups, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        groups.append(list(items[start:end]))
        start = end
    return groups
