"""The contract between the write operator and the Spark write job.

The operator writes a :class:`WriteJobSpec` as JSON into a private file shipped with
``--files`` (storage options, which may hold credentials, never go on a command
line); the job writes fragments, then stores a :class:`WriteJobResult` (the
``FragmentMetadata`` list, Spark's row count, bytes written, the Arrow schema) at the
staging location. The job never commits; the operator commits from the result.

Staging location: ``<dataset uri>/_airflow_staging/<key digest>.json`` unless the
operator is given a ``staging_uri`` directory. Data files are under the dataset's
``data/`` as usual; files of a failed job are unreferenced and removed by version
cleanup after its grace period.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self, get_args

import pyarrow as pa

from airflow_lance.core import FragmentMetadata, InvalidInputError, SchemaMismatchError
from airflow_lance.core.layout import data_file_path
from airflow_lance.core.storage import open_store

WriteMode = Literal["create", "append", "overwrite"]
SourceKind = Literal["path", "sql", "callable", "lance"]
SPEC_VERSION = 1
STAGING_DIR = "_airflow_staging"
MAX_ROWS_PER_FILE = 1024 * 1024
MAX_BYTES_PER_FILE = 90 * 1024**3


#: values of a write's ``reader``
READERS = ("auto", "direct", "spark")


class JobSpecError(InvalidInputError):
    """A job spec or staged result is malformed (the message names the field)."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`JobSpecError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise JobSpecError(message)


def _positive_int(name: str, value: Any) -> int:
    require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
             f"{name} must be a positive integer, not {value!r}")
    return int(value)


def size_map(name: str, value: Any) -> dict[str, int]:
    """``value`` as {column: positive size} (sizes may be digit strings, as templates render them)."""
    require(isinstance(value, Mapping), f"{name} must be a mapping of column names to sizes, not {type(value).__name__}")
    sizes = {}
    for key, size in value.items():
        text = str(size).strip()
        require(not isinstance(size, bool) and text.isdigit() and int(text) > 0,
                f"{name}[{key!r}] must be a positive integer, not {size!r}")
        sizes[str(key)] = int(text)
    return sizes


_LIST_TYPE = re.compile(r"^(fixed_size_list|large_list|list)\s*<\s*(.+?)\s*>\s*(?:\[\s*(\d+)\s*\])?$")


def parse_type(text: Any) -> pa.DataType:
    """The Arrow type a cast names: a pyarrow type alias (``float32``, ``float64``, ``int64``, ``string``,
    ``bool``, ``date32``, ``timestamp[us]``, ...), ``list<T>``, ``large_list<T>`` or
    ``fixed_size_list<T>[N]`` (T itself such a type). JobSpecError for anything else."""
    require(isinstance(text, str) and bool(text.strip()), f"a cast type must be a type name, not {text!r}")
    text = text.strip()
    match = _LIST_TYPE.match(text)
    if match is None:
        try:
            return pa.type_for_alias(text)
        except ValueError:
            raise JobSpecError(
                f"unknown type {text!r} (e.g. float32, float64, int64, string, bool, timestamp[us], "
                "list<float32>, fixed_size_list<float32>[64])") from None
    kind, item, size = match.groups()
    value_type = parse_type(item)
    if kind == "fixed_size_list":
        require(size is not None and int(size) > 0, f"fixed_size_list needs a positive size: {text!r}")
        return pa.list_(value_type, int(size))
    require(size is None, f"only fixed_size_list takes a size: {text!r}")
    return pa.large_list(value_type) if kind == "large_list" else pa.list_(value_type)


def vector_map(value: Any) -> tuple[dict[str, int], dict[str, str]]:
    """``fixed_size_lists`` as ({column: size}, {column: cast type}): a size (``64``, ``"64"``) keeps
    the element type, a pair (``(64, "float32")``, ``[64, "float32"]``) casts the elements too."""
    require(isinstance(value, Mapping),
            f"fixed_size_lists must be a mapping of column names to sizes, not {type(value).__name__}")
    sizes: dict[str, Any] = {}
    casts: dict[str, str] = {}
    for key, entry in value.items():
        if isinstance(entry, Sequence) and not isinstance(entry, str):
            require(len(entry) == 2, f"fixed_size_lists[{key!r}] must be a size or (size, element type), "
                                     f"not {entry!r}")
            size = size_map("fixed_size_lists", {key: entry[0]})[str(key)]
            try:
                parse_type(entry[1])
            except JobSpecError as exc:
                raise JobSpecError(f"fixed_size_lists[{key!r}]: {exc}") from None
            casts[str(key)] = f"fixed_size_list<{str(entry[1]).strip()}>[{size}]"
        else:
            sizes[str(key)] = entry
    return size_map("fixed_size_lists", sizes), casts


def cast_map(value: Any) -> dict[str, str]:
    """``cast`` as {column: type name}, every type checked by :func:`parse_type`."""
    require(isinstance(value, Mapping), f"cast must be a mapping of column names to types, not {type(value).__name__}")
    for key, text in value.items():
        try:
            parse_type(text)
        except JobSpecError as exc:
            raise JobSpecError(f"cast[{key!r}]: {exc}") from None
    return {str(k): str(v).strip() for k, v in value.items()}


def _same_type(left: pa.DataType, right: pa.DataType) -> bool:
    """Equal types, list child names aside."""
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    for test in lists:
        if test(left) and test(right):
            return getattr(left, "list_size", None) == getattr(right, "list_size", None) and \
                _same_type(left.value_type, right.value_type)
    return left == right


def check_against_dataset(schema: pa.Schema, sizes: Mapping[str, int], casts: Mapping[str, str]) -> None:
    """Appends keep the dataset's types: a column to be cast or stored as a fixed-size list must be a
    column of the dataset (``JobSpecError`` naming it otherwise) that already has that type
    (:class:`SchemaMismatchError` otherwise)."""
    for name in [*sizes, *casts]:
        if schema.get_field_index(name) < 0:
            raise JobSpecError(f"column {name!r} to be cast is not a column of the dataset "
                               f"(columns: {', '.join(schema.names)})")
    for name, size in sizes.items():
        dtype = schema.field(name).type
        if not (pa.types.is_fixed_size_list(dtype) and dtype.list_size == size):
            raise SchemaMismatchError(
                f"column {name!r} is {dtype} in the dataset: it cannot be appended as a {size}-item fixed-size list")
    for name, text in casts.items():
        dtype = schema.field(name).type
        if not _same_type(dtype, parse_type(text)):
            raise SchemaMismatchError(
                f"column {name!r} is {dtype} in the dataset: it cannot be appended cast to {text}")


def string_map(name: str, value: Any) -> dict[str, str]:
    """``value`` as a dict of strings; JobSpecError unless it is a mapping."""
    require(isinstance(value, Mapping), f"{name} must be a mapping of strings, not {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}


@dataclasses.dataclass(frozen=True)
class LanceSourceSpec:
    """A Lance dataset read with ``read_lance``: the version (pinned by the operator), the
    projection, the filter, ``since_version``, and the storage options (kept out of ``repr``,
    :meth:`SourceSpec.describe` and the spec digest)."""

    uri: str
    version: int | str | None = None
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    since_version: int | str | None = None
    storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        require(isinstance(self.uri, str) and bool(self.uri), "source_lance_uri must be a non-empty string")
        for name in ("version", "since_version"):
            value = getattr(self, name)
            require(value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)),
                    f"source_lance_{name} must be a version number or a tag name, not {value!r}")
        if self.columns is not None:
            require(not isinstance(self.columns, str) and all(isinstance(c, str) and c for c in self.columns),
                    f"source_lance_columns must be a list of column names, not {self.columns!r}")
            object.__setattr__(self, "columns", tuple(self.columns))
        require(self.filter is None or isinstance(self.filter, str), "source_lance_filter must be a SQL string")
        object.__setattr__(self, "storage_options", string_map("source storage_options", self.storage_options or {}))

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "version": self.version, "filter": self.filter, "since_version": self.since_version,
                "columns": list(self.columns) if self.columns is not None else None,
                "storage_options": dict(self.storage_options)}

    @classmethod
    def from_json(cls, data: Any) -> LanceSourceSpec:
        require(isinstance(data, Mapping), "source lance must be an object")
        try:
            return cls(uri=data["uri"], version=data.get("version"), columns=data.get("columns"),
                       filter=data.get("filter"), since_version=data.get("since_version"),
                       storage_options=data.get("storage_options") or {})
        except KeyError as exc:
            raise JobSpecError(f"source lance lacks {exc.args[0]!r}") from None


def pin_lance_source(
    uri: str,
    *,
    version: int | str | None = None,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    since_version: int | str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> LanceSourceSpec:
    """The Lance source at ``version`` (default: the latest now) pinned to its number, checked
    before Spark runs: the version or tag exists, the columns and filter compile against its
    schema, ``since_version`` is a version before it (the core's typed errors otherwise)."""
    from airflow_lance.core import changes_between, dataset
    from airflow_lance.core.fragment_read import SelectionReader

    if filter is not None and not isinstance(filter, str):
        raise JobSpecError(f"source_lance_filter must be a SQL string, not {type(filter).__name__}")
    ds = dataset(uri, version, storage_options=dict(storage_options or {}))
    SelectionReader(ds, columns, filter)
    if since_version is not None:
        changes_between(ds, since_version)
    return LanceSourceSpec(uri=uri, version=ds.version, columns=columns, filter=filter, since_version=since_version,
                           storage_options=dict(storage_options or {}))


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """What the job reads: Spark-readable path(s), a Spark SQL query, ``module:function(spark)``,
    or a Lance dataset (:class:`LanceSourceSpec`)."""

    kind: SourceKind
    paths: tuple[str, ...] = ()
    format: str = "parquet"
    options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    query: str | None = None
    callable: str | None = None
    lance: LanceSourceSpec | None = None

    @classmethod
    def from_fields(
        cls,
        *,
        path: str | Sequence[str] | None = None,
        format: str | None = None,
        options: Mapping[str, Any] | None = None,
        sql: str | None = None,
        callable: str | None = None,
        lance: LanceSourceSpec | None = None,
    ) -> SourceSpec:
        """Validate operator fields: exactly one of ``path``, ``sql``, ``callable`` and ``lance``."""
        fields = (("source_path", path), ("source_sql", sql), ("source_callable", callable), ("source_lance_uri", lance))
        given = [name for name, value in fields if value not in (None, "", [], ())]
        require(len(given) == 1,
                 f"give exactly one of source_path, source_sql, source_callable, source_lance_uri "
                 f"(got {given or 'none'})")
        if lance is not None:
            require(isinstance(lance, LanceSourceSpec), "a Lance source must be a LanceSourceSpec")
            require(not options and not format, "source_format and source_options apply to source_path only")
            return cls("lance", lance=lance)
        if path not in (None, "", [], ()):
            paths = (path,) if isinstance(path, str) else tuple(path)  # type: ignore[arg-type]
            require(all(isinstance(p, str) and p for p in paths), "source_path must be a path or a list of paths")
            require(isinstance(format or "parquet", str), "source_format must be a string")
            options = string_map("source_options", options or {})
            return cls("path", paths=paths, format=format or "parquet", options=options)
        require(not options and not format, "source_format and source_options apply to source_path only")
        if sql not in (None, ""):
            require(isinstance(sql, str), "source_sql must be a string")
            return cls("sql", query=sql)
        require(isinstance(callable, str) and callable.count(":") == 1 and all(callable.split(":")),
                 f"source_callable must look like 'package.module:function', not {callable!r}")
        return cls("callable", callable=callable)

    def describe(self) -> str:
        """A log-friendly description (option values left out: they may hold credentials)."""
        if self.kind == "path":
            keys = f" options={sorted(self.options)}" if self.options else ""
            return f"{self.format} at {', '.join(self.paths)}{keys}"
        if self.kind == "sql":
            return f"Spark SQL query ({len(self.query or '')} characters)"
        if self.kind == "lance" and self.lance is not None:
            parts = [f"version {self.lance.version}" if self.lance.version is not None else "latest version"]
            if self.lance.since_version is not None:
                parts.append(f"rows changed since version {self.lance.since_version}")
            if self.lance.columns is not None:
                parts.append(f"columns {list(self.lance.columns)}")
            if self.lance.filter:
                parts.append(f"filter ({len(self.lance.filter)} characters)")
            keys = f", storage options {sorted(self.lance.storage_options)}" if self.lance.storage_options else ""
            return f"Lance dataset {self.lance.uri} ({', '.join(parts)}{keys})"
        return f"callable {self.callable}"

    def to_json(self) -> dict[str, Any]:
        data = {"kind": self.kind, "paths": list(self.paths), "format": self.format, "options": dict(self.options),
                "query": self.query, "callable": self.callable}
        if self.lance is not None:
            data["lance"] = self.lance.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceSpec:
        require(isinstance(data, Mapping), "source must be an object")
        kind = data.get("kind")
        require(kind in get_args(SourceKind), f"source kind must be one of {get_args(SourceKind)}, not {kind!r}")
        if kind == "path":
            return cls.from_fields(path=list(data.get("paths") or []), format=data.get("format"),
                                   options=data.get("options") or {})
        if kind == "sql":
            return cls.from_fields(sql=data.get("query"))
        if kind == "lance":
            return cls.from_fields(lance=LanceSourceSpec.from_json(data.get("lance")))
        return cls.from_fields(callable=data.get("callable"))


@dataclasses.dataclass(frozen=True)
class WriteJobSpec:
    """One Spark write: the dataset, the mode, the source, file sizing and where to stage the result."""

    uri: str
    mode: WriteMode
    source: SourceSpec
    read_version: int
    staging_root: str
    staging_name: str
    storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    max_rows_per_file: int = MAX_ROWS_PER_FILE
    max_bytes_per_file: int = MAX_BYTES_PER_FILE
    num_partitions: int | None = None
    data_storage_version: str | None = None
    #: array columns stored as fixed-size lists of this many items (vectors), {column: size}; entries
    #: giving an element type too (``(64, "float32")``) become ``cast`` entries
    fixed_size_lists: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: columns cast on the executors, {column: type name} (see :func:`parse_type`)
    cast: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: ``package.module:function`` mapping the source DataFrame to the DataFrame written
    transform: str | None = None
    #: how a ``source_path`` is read: ``auto`` (directly with pyarrow where that is exact, else Spark),
    #: ``direct`` or ``spark`` (:mod:`airflow_lance.spark.direct`)
    reader: str = "auto"

    def __post_init__(self) -> None:
        require(isinstance(self.uri, str) and bool(self.uri), "uri must be a non-empty string")
        require(self.mode in get_args(WriteMode), f"mode must be one of {get_args(WriteMode)}, not {self.mode!r}")
        require(isinstance(self.source, SourceSpec), "source must be a SourceSpec")
        require(isinstance(self.read_version, int) and self.read_version >= 0,
                 f"read_version must be a non-negative integer, not {self.read_version!r}")
        require(bool(self.staging_root) and bool(self.staging_name), "staging location is missing")
        _positive_int("max_rows_per_file", self.max_rows_per_file)
        _positive_int("max_bytes_per_file", self.max_bytes_per_file)
        if self.num_partitions is not None:
            _positive_int("num_partitions", self.num_partitions)
        require(self.transform is None or (isinstance(self.transform, str) and self.transform.count(":") == 1
                                           and all(self.transform.split(":"))),
                f"transform must look like 'package.module:function', not {self.transform!r}")
        require(self.data_storage_version is None or isinstance(self.data_storage_version, str),
                 f"data_storage_version must be a string such as '2.0', not {self.data_storage_version!r}")
        require(self.reader in READERS, f"reader must be one of {READERS}, not {self.reader!r}")
        sizes, vector_casts = vector_map(self.fixed_size_lists)
        casts = cast_map(self.cast)
        twice = sorted((set(sizes) | set(vector_casts)) & set(casts))
        require(not twice, f"column(s) {twice} named in both fixed_size_lists and cast: name each once")
        object.__setattr__(self, "fixed_size_lists", sizes)
        object.__setattr__(self, "cast", {**casts, **vector_casts})

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"fixed_size_lists": dict(self.fixed_size_lists)} if self.fixed_size_lists else {}
        if self.cast:
            extra["cast"] = dict(self.cast)
        if self.transform:
            extra["transform"] = self.transform
        if self.reader != "auto":
            extra["reader"] = self.reader
        return {
            **extra,
            "spec_version": SPEC_VERSION,
            "uri": self.uri,
            "mode": self.mode,
            "source": self.source.to_json(),
            "read_version": self.read_version,
            "staging_root": self.staging_root,
            "staging_name": self.staging_name,
            "storage_options": dict(self.storage_options),
            "max_rows_per_file": self.max_rows_per_file,
            "max_bytes_per_file": self.max_bytes_per_file,
            "num_partitions": self.num_partitions,
            "data_storage_version": self.data_storage_version,
        }

    def to_json(self) -> str:
        """The spec as JSON (includes storage options: store it privately, never log it)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> WriteJobSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise JobSpecError(f"job spec is not JSON: {exc}") from None
        require(isinstance(data, dict), "job spec must be a JSON object")
        require(data.get("spec_version") == SPEC_VERSION,
                 f"job spec version {data.get('spec_version')!r} is not {SPEC_VERSION}: operator and job differ")
        try:
            return cls(
                uri=data["uri"],
                mode=data["mode"],
                source=SourceSpec.from_json(data["source"]),
                read_version=data["read_version"],
                staging_root=data["staging_root"],
                staging_name=data["staging_name"],
                storage_options=string_map("storage_options", data.get("storage_options") or {}),
                max_rows_per_file=data.get("max_rows_per_file", MAX_ROWS_PER_FILE),
                max_bytes_per_file=data.get("max_bytes_per_file", MAX_BYTES_PER_FILE),
                num_partitions=data.get("num_partitions"),
                data_storage_version=data.get("data_storage_version"),
                fixed_size_lists=data.get("fixed_size_lists") or {},
                cast=data.get("cast") or {},
                transform=data.get("transform"),
                reader=data.get("reader", "auto"),
            )
        except KeyError as exc:
            raise JobSpecError(f"job spec lacks {exc.args[0]!r}") from None

    def digest(self) -> str:
        """Identity of the write (storage options and staging location left out): a retry may
        reuse a staged result only if its digest matches."""
        data = self.to_dict()
        for key in ("storage_options", "staging_root", "staging_name"):
            data.pop(key)
        data["source"].get("lance", {}).pop("storage_options", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def staging_location(dataset_uri: str, idempotency_key: str, staging_uri: str | None = None) -> tuple[str, str]:
    """(store root, object name) of the staged result of the write with ``idempotency_key``."""
    name = hashlib.sha256(idempotency_key.encode()).hexdigest()[:32] + ".json"
    if staging_uri:
        return staging_uri, name
    return dataset_uri, f"{STAGING_DIR}/{name}"


def receipt_location(dataset_uri: str, idempotency_key: str, staging_uri: str | None = None) -> tuple[str, str]:
    """(store root, object name) of the commit receipt of the write with ``idempotency_key``."""
    root, name = staging_location(dataset_uri, idempotency_key, staging_uri)
    return root, name.removesuffix(".json") + ".landed.json"


def stage_document(staging_root: str, staging_name: str, storage_options: Mapping[str, str], data: bytes) -> None:
    """Store a staged document (atomically: readers see all of it or nothing)."""
    open_store(staging_root, storage_options).write(staging_name, data)


def load_staged_document(staging_root: str, staging_name: str, storage_options: Mapping[str, str]) -> bytes | None:
    """A staged document, or None if there is none."""
    try:
        return open_store(staging_root, storage_options).read(staging_name)
    except FileNotFoundError:
        return None


def discard_staged(staging_root: str, staging_name: str, storage_options: Mapping[str, str]) -> None:
    """Remove a staged document (missing is fine)."""
    open_store(staging_root, storage_options).delete(staging_name)


def missing_fragment_files(dataset_uri: str, storage_options: Mapping[str, str],
                           fragments: Sequence[FragmentMetadata]) -> list[str]:
    """The data and deletion files of ``fragments`` (in the dataset's own base) that do not exist:
    a staged result naming any of them must not be committed."""
    from airflow_lance.core.deletion import deletion_path

    store = open_store(dataset_uri, storage_options)
    paths = [data_file_path(f.path) for fragment in fragments for f in fragment.files if f.base_id is None]
    paths += [deletion_path(fragment.id, fragment.deletion_file) for fragment in fragments
              if fragment.deletion_file is not None and fragment.deletion_file.base_id is None]
    return [path for path in paths if not store.exists(path)]


class StagedResult:
    """Saving, loading and discarding a job result staged as JSON (``to_json`` / ``from_json``)."""

    def to_json(self) -> str:
        raise NotImplementedError

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        raise NotImplementedError

    def save(self, staging_root: str, staging_name: str, storage_options: Mapping[str, str]) -> None:
        """Store the result (atomically: readers see all of it or nothing)."""
        stage_document(staging_root, staging_name, storage_options, self.to_json().encode())

    @classmethod
    def load(cls, staging_root: str, staging_name: str, storage_options: Mapping[str, str]) -> Self | None:
        """The staged result, or None if there is none."""
        data = load_staged_document(staging_root, staging_name, storage_options)
        return None if data is None else cls.from_json(data)

    @staticmethod
    def discard(staging_root: str, staging_name: str, storage_options: Mapping[str, str]) -> None:
        """Remove the staged result (data files it names stay: committed, or left for cleanup)."""
        discard_staged(staging_root, staging_name, storage_options)


@dataclasses.dataclass(frozen=True)
class WriteJobResult(StagedResult):
    """What a finished job staged: fragments (uncommitted), Spark's row count, bytes, schema."""

    spec_digest: str
    fragments: tuple[FragmentMetadata, ...]
    num_rows: int
    bytes_written: int
    schema: pa.Schema | None
    elapsed_seconds: float

    def to_json(self) -> str:
        schema = base64.b64encode(self.schema.serialize().to_pybytes()).decode() if self.schema is not None else None
        return json.dumps({
            "spec_digest": self.spec_digest,
            "fragments": [f.to_json() for f in self.fragments],
            "num_rows": self.num_rows,
            "bytes_written": self.bytes_written,
            "schema": schema,
            "elapsed_seconds": self.elapsed_seconds,
        })

    @classmethod
    def from_json(cls, text: str | bytes) -> WriteJobResult:
        try:
            data = json.loads(text)
            schema = (pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"])))
                      if data.get("schema") else None)
            return cls(
                spec_digest=str(data["spec_digest"]),
                fragments=tuple(FragmentMetadata.from_json(f) for f in data["fragments"]),
                num_rows=int(data["num_rows"]),
                bytes_written=int(data["bytes_written"]),
                schema=schema,
                elapsed_seconds=float(data["elapsed_seconds"]),
            )
        except (ValueError, KeyError, TypeError, pa.ArrowInvalid) as exc:
            raise JobSpecError(f"staged job result is malformed: {exc!r}") from None

    def missing_files(self, dataset_uri: str, storage_options: Mapping[str, str]) -> list[str]:
        """Data files of the staged fragments that do not exist (any means: do not commit it)."""
        return missing_fragment_files(dataset_uri, storage_options, self.fragments)


@dataclasses.dataclass(frozen=True)
class WriteReceipt(StagedResult):
    """Left by the operator after its commit: the key and the summary of the version it made.

    The idempotency look-back recognises a landed commit only while its version exists; the
    receipt lives in the staging area, which version cleanup removes only when it is 7 days old
    (and older than the oldest kept version), so a retry still finds it after a cleanup with
    ``retain_versions`` removed the version.
    """

    idempotency_key: str
    summary: Mapping[str, Any]

    def to_json(self) -> str:
        return json.dumps({"idempotency_key": self.idempotency_key, "summary": dict(self.summary)})

    @classmethod
    def from_json(cls, text: str | bytes) -> WriteReceipt:
        try:
            data = json.loads(text)
            return cls(idempotency_key=str(data["idempotency_key"]), summary=dict(data["summary"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise JobSpecError(f"commit receipt is malformed: {exc!r}") from None
