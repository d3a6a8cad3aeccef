"""Arrow schema <-> Lance field list.

Lance stores a schema as a flat list of :class:`lance.file.Field` messages in
pre-order (a parent before its children, children in order). Every field has
an id, the id of its parent (``-1`` at top level) and a *logical type* string
(format notes, section 5). This module converts in both directions, with the
exact strings pylance writes, so a manifest written here reads identically in
pylance and vice versa.

Public API::

    LanceSchema.from_arrow(schema: pa.Schema) -> LanceSchema     # new ids 0, 1, 2, ... pre-order
    LanceSchema.from_fields(fields, metadata) -> LanceSchema     # from a manifest / file descriptor
    LanceSchema.fields: list[file_pb2.Field]                     # pre-order
    LanceSchema.metadata: dict[str, bytes]                       # arrow schema metadata
    LanceSchema.to_arrow() -> pa.Schema
    LanceSchema.to_proto() -> file_pb2.Schema
    LanceSchema.max_field_id() -> int                            # -1 when empty
    LanceSchema.field_ids() -> list[int]                         # pre-order
    LanceSchema.field(field_id) -> file_pb2.Field
    LanceSchema.children(field_id) -> list[file_pb2.Field]
    LanceSchema.top_level() -> list[file_pb2.Field]
    LanceSchema.subtree_ids(field_id) -> list[int]               # field and descendants, pre-order
    LanceSchema.arrow_field(field_id) -> pa.Field
    LanceSchema.project(columns) -> LanceSchema                  # top-level names, ids kept
    LanceSchema.check_compatible(other: pa.Schema) -> None       # raises SchemaMismatchError
    LanceSchema.align(data) -> pa.RecordBatch | pa.Table         # reorder + cast to this schema

Normalisations, identical to pylance 14 (verified against it):

* a fixed-size list has no child field; its item comes back as ``item``,
  nullable, without metadata, whatever name/nullability/metadata it had;
* dictionaries come back unordered (``dict:...:false``);
* ``string_view``/``binary_view`` are stored as ``string``/``binary``;
* JSON (``arrow.json``) is stored as pylance stores it: logical type ``json``, ``lance.json``
  metadata, JSONB bytes (``core/jsonb.py``); a ``json`` field without that metadata reads as
  ``large_binary``.

Maps are stored as pylance 14 stores them (logical type ``map``, a non-null ``entries`` struct of a
non-null key and a value; 2.2 files only). Extension types are stored as their storage type with
the ``ARROW:extension:name``/``ARROW:extension:metadata`` field metadata, as pylance stores them,
and read back as the extension type pyarrow knows by that name (else as the storage type with
that metadata, as Arrow IPC does); ``lance.blob.v2``, whose values Lance stores elsewhere, keeps
its storage type (``core/file/blob_v2.py``).

Unsupported (``UnsupportedFeatureError`` naming the field): maps with sorted keys, union,
list_view, run-end encoded, decimal32/64, fixed-size lists of
variable-size lists. pylance rejects all of these for 2.0 datasets as well.
Top-level names containing ``.`` and duplicate sibling names are rejected with
``InvalidInputError`` (pylance does the same).

Append compatibility (:meth:`LanceSchema.check_compatible`): fields are matched
by name at every struct level, so a different field order is accepted (as
pylance does); logical types must be equal; nullability and field metadata of
the incoming data are ignored (the dataset's win). Missing and extra fields
are errors: pylance fills missing columns with nulls, this implementation
requires every column.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import pyarrow as pa

from airflow_lance.core._proto import file_pb2
from airflow_lance.core.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError

_Data = TypeVar("_Data", pa.RecordBatch, pa.Table)

_SIMPLE_TO_LOGICAL: dict[pa.DataType, str] = {
    pa.null(): "null",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint8",
    pa.uint16(): "uint16",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.float16(): "halffloat",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "large_string",
    pa.binary(): "binary",
    pa.large_binary(): "large_binary",
    pa.date32(): "date32:day",
    pa.date64(): "date64:ms",
}
_LOGICAL_TO_SIMPLE: dict[str, pa.DataType] = {v: k for k, v in _SIMPLE_TO_LOGICAL.items()}
_LOGICAL_TO_SIMPLE["json"] = pa.large_binary()
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}

_UNIT_TYPES = {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}
_NESTED = {"struct", "list", "large_list", "list.struct", "large_list.struct", "map"}
_FSL_PREFIX = "fixed_size_list:"
_DICT_PREFIX = "dict:"


def _leaf_logical_type(dtype: pa.DataType) -> str:
    """Logical type string of a type that needs no child field."""
    dtype = _VIEW_TYPES.get(dtype, dtype)
    simple = _SIMPLE_TO_LOGICAL.get(dtype)
    if simple is not None:
        return simple
    if pa.types.is_timestamp(dtype):
        return f"timestamp:{dtype.unit}:{dtype.tz or '-'}"
    if pa.types.is_time32(dtype) or pa.types.is_time64(dtype):
        return f"time{dtype.bit_width}:{dtype.unit}"
    if pa.types.is_duration(dtype):
        return f"duration:{dtype.unit}"
    if pa.types.is_decimal128(dtype) or pa.types.is_decimal256(dtype):
        return f"decimal:{dtype.bit_width}:{dtype.precision}:{dtype.scale}"
    if pa.types.is_fixed_size_binary(dtype):
        return f"fixed_size_binary:{dtype.byte_width}"
    if pa.types.is_fixed_size_list(dtype) and not pa.types.is_struct(dtype.value_type):
        return f"{_FSL_PREFIX}{_leaf_logical_type(dtype.value_type)}:{dtype.list_size}"
    if pa.types.is_dictionary(dtype):
        return f"{_DICT_PREFIX}{_leaf_logical_type(dtype.value_type)}:{_leaf_logical_type(dtype.index_type)}:false"
    raise UnsupportedFeatureError(f"unsupported arrow type {dtype}")


def _parse_leaf_logical_type(logical: str) -> pa.DataType:
    """Arrow type of a logical type string that has no child fields."""
    simple = _LOGICAL_TO_SIMPLE.get(logical)
    if simple is not None:
        return simple
    head, _, rest = logical.partition(":")
    if head == "timestamp":
        unit, _, tz = rest.partition(":")
        return pa.timestamp(unit, None if tz in ("-", "") else tz)
    if head in _UNIT_TYPES:
        return _UNIT_TYPES[head](rest)
    if head == "decimal":
        bits, precision, scale = rest.split(":")
        factory = {"128": pa.decimal128, "256": pa.decimal256}[bits]
        return factory(int(precision), int(scale))
    if head == "fixed_size_binary":
        return pa.binary(int(rest))
    if head == "fixed_size_list":
        item, _, size = rest.rpartition(":")
        return pa.list_(_parse_leaf_logical_type(item), int(size))
    if head == "dict":
        value, key, _ordered = rest.rsplit(":", 2)
        return pa.dictionary(_parse_leaf_logical_type(key), _parse_leaf_logical_type(value))
    raise UnsupportedFeatureError(f"unknown logical type {logical!r}")


def arrow_type_of(logical: str) -> pa.DataType:
    """The Arrow type of a leaf field's Lance ``logical_type`` (``"int32"``, ``"dict:string:int32:false"``, ...)."""
    return _parse_leaf_logical_type(logical)


_EXTENSION_NAME, _EXTENSION_METADATA = "ARROW:extension:name", "ARROW:extension:metadata"
_EXTENSION_KEYS = (_EXTENSION_NAME, _EXTENSION_METADATA)
#: Extension types whose stored values Lance transforms (blob v2: descriptors and sidecar files):
#: fields of them keep their storage type here (JSON, stored as JSONB, reads as ``arrow.json``).
OPAQUE_EXTENSIONS = ("lance.blob.v2",)
#: ``ARROW:extension:name`` of JSON fields as pylance stores them (logical type ``json``, JSONB bytes).
JSON_EXTENSION = b"lance.json"


def _extension_type(storage: pa.DataType, metadata: Mapping[str, bytes]) -> pa.DataType | None:
    """The Arrow extension type a stored field's ``ARROW:extension:*`` metadata names, as Arrow IPC
    reads it: a type pyarrow knows (the canonical ``arrow.uuid``, ``arrow.fixed_shape_tensor``,
    ``arrow.bool8``, ``arrow.opaque``, or one registered by the application, pylance's
    ``lance.bfloat16`` among them), else None (the storage type, the metadata kept)."""
    name = metadata.get(_EXTENSION_NAME)
    if name is None or name.decode(errors="replace") in OPAQUE_EXTENSIONS:
        return None
    field = pa.field("x", storage, metadata={k: v for k, v in metadata.items() if k in _EXTENSION_KEYS})
    try:
        read = pa.ipc.read_schema(pa.py_buffer(pa.schema([field]).serialize())).field(0).type
    except (pa.ArrowException, ValueError):  # metadata the type's deserializer refuses: the storage
        return None
    return read if isinstance(read, pa.BaseExtensionType) else None


def _extension_metadata(dtype: pa.BaseExtensionType, path: str) -> dict[str, bytes]:
    """``ARROW:extension:*`` field metadata for an extension type, as Arrow IPC writes it."""
    name = dtype.extension_name
    if name == "arrow.json":  # stored as pylance stores it: JSONB (core/jsonb.py)
        return {_EXTENSION_NAME: JSON_EXTENSION, _EXTENSION_METADATA: b""}
    if name == "lance.json":
        raise UnsupportedFeatureError(f"field {path!r}: extension type lance.json (write JSON text as arrow.json)")
    if hasattr(dtype, "__arrow_ext_serialize__"):  # defined in Python (pa.ExtensionType)
        serialized = dtype.__arrow_ext_serialize__()
    elif name in ("arrow.uuid", "arrow.bool8"):
        serialized = b""
    elif name == "arrow.fixed_shape_tensor":
        described = {"shape": list(dtype.shape)}
        if dtype.dim_names:
            described["dim_names"] = list(dtype.dim_names)
        if dtype.permutation:
            described["permutation"] = list(dtype.permutation)
        serialized = json.dumps(described, separators=(",", ":")).encode()
    elif name == "arrow.opaque":
        serialized = json.dumps({"type_name": dtype.type_name, "vendor_name": dtype.vendor_name},
                                separators=(",", ":")).encode()
    else:
        raise UnsupportedFeatureError(f"field {path!r}: extension type {name} is not supported")
    return {_EXTENSION_NAME: name.encode(), _EXTENSION_METADATA: serialized}


def storage_type(dtype: pa.DataType, *, only_json: bool = False) -> pa.DataType:
    """``dtype`` with every extension type replaced by its storage type, at any depth (what the
    data files store; JSON: JSONB bytes, core/jsonb.py). ``only_json``: JSON alone (the legacy
    writer stores no other extension type)."""
    if isinstance(dtype, pa.BaseExtensionType):
        if dtype.extension_name == "arrow.json":
            return pa.large_binary()
        return dtype if only_json else storage_type(dtype.storage_type)

    def inner(child: pa.DataType) -> pa.DataType:
        return storage_type(child, only_json=only_json)

    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(inner(f.type)) for f in dtype])
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_field.with_type(inner(dtype.key_type)),
                       dtype.item_field.with_type(inner(dtype.item_type)))
    if pa.types.is_list(dtype):
        return pa.list_(dtype.value_field.with_type(inner(dtype.value_type)))
    if pa.types.is_large_list(dtype):
        return pa.large_list(dtype.value_field.with_type(inner(dtype.value_type)))
    if pa.types.is_fixed_size_list(dtype):
        return pa.list_(dtype.value_field.with_type(inner(dtype.value_type)), dtype.list_size)
    return dtype


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """:func:`storage_type` of every field."""
    return pa.schema([f.with_type(storage_type(f.type)) for f in schema], metadata=schema.metadata)


def _legacy_encoding(dtype: pa.DataType) -> int:
    """The legacy ``Field.encoding`` hint pylance writes (format notes 3.5)."""
    if pa.types.is_struct(dtype) or pa.types.is_null(dtype):
        return file_pb2.NONE
    if pa.types.is_dictionary(dtype):
        return file_pb2.DICTIONARY
    if dtype in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), *_VIEW_TYPES):
        return file_pb2.VAR_BINARY
    return file_pb2.PLAIN


def _encode_metadata(metadata: Mapping[bytes, bytes] | None, where: str) -> dict[str, bytes]:
    """Arrow metadata as stored in Lance; keys and values must be UTF-8 (pylance rejects others too)."""
    try:
        return {k.decode("utf-8"): v.decode("utf-8").encode("utf-8") for k, v in (metadata or {}).items()}
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"metadata of {where} is not valid UTF-8") from exc


class LanceSchema:
    """A Lance schema: pre-order field list with ids plus schema metadata."""

    def __init__(self, fields: Iterable[file_pb2.Field], metadata: Mapping[str, bytes] | None = None) -> None:
        """Build from an already validated pre-order field list; prefer the classmethods."""
        self.fields: list[file_pb2.Field] = list(fields)
        self.metadata: dict[str, bytes] = dict(metadata or {})
        self._by_id: dict[int, file_pb2.Field] = {f.id: f for f in self.fields}
        self._children: dict[int, list[file_pb2.Field]] = {f.id: [] for f in self.fields}
        self._children[-1] = []
        for f in self.fields:
            self._children[f.parent_id].append(f)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_arrow(cls, schema: pa.Schema) -> LanceSchema:
        """Convert an Arrow schema; ids are assigned 0, 1, 2, ... in pre-order."""
        fields: list[file_pb2.Field] = []
        _check_unique_names([f.name for f in schema], "the schema")
        for f in schema:
            if "." in f.name:
                raise InvalidInputError(f"top-level field name {f.name!r} cannot contain '.'")
            _add_arrow_field(fields, f, -1, f.name)
        return cls(fields, _encode_metadata(schema.metadata, "the schema"))

    @classmethod
    def from_fields(cls, fields: Iterable[file_pb2.Field], metadata: Mapping[str, bytes] | None = None) -> LanceSchema:
        """Build from stored fields (manifest or data-file descriptor).

        Parents must precede their children; the result is re-ordered into a
        strict pre-order. Raises ``InvalidInputError`` for an inconsistent list
        (duplicate ids, dangling parents, wrong child count, malformed logical
        type) and ``UnsupportedFeatureError`` for unknown logical types.
        """
        stored = [_copy_field(f) for f in fields]
        ids: set[int] = set()
        children: dict[int, list[file_pb2.Field]] = {-1: []}
        for f in stored:
            if f.id in ids or f.id < 0:
                raise InvalidInputError(f"duplicate or negative field id {f.id}")
            if f.parent_id not in children:
                raise InvalidInputError(f"field {f.name!r} (id {f.id}) has unknown parent id {f.parent_id}")
            ids.add(f.id)
            children[f.parent_id].append(f)
            children[f.id] = []
        ordered: list[file_pb2.Field] = []

        def walk(f: file_pb2.Field) -> None:
            ordered.append(f)
            for child in children[f.id]:
                walk(child)

        for top in children[-1]:
            walk(top)
        schema = cls(ordered, metadata)
        for top in schema.top_level():
            schema.arrow_field(top.id)  # validates logical types and child counts
        return schema

    # ------------------------------------------------------------------ queries

    def to_arrow(self) -> pa.Schema:
        """The Arrow schema (field and schema metadata included)."""
        return pa.schema([self.arrow_field(f.id) for f in self.top_level()], metadata=self.metadata or None)

    @classmethod
    def from_pyarrow(cls, schema: pa.Schema) -> LanceSchema:
        """pylance's name of :meth:`from_arrow` (fresh field ids from 0)."""
        return cls.from_arrow(schema)

    def to_pyarrow(self) -> pa.Schema:
        """pylance's name of :meth:`to_arrow`."""
        return self.to_arrow()

    def to_proto(self) -> file_pb2.Schema:
        """``lance.file.Schema`` message (as stored in a data file's descriptor)."""
        return file_pb2.Schema(fields=self.fields, metadata=self.metadata)

    def max_field_id(self) -> int:
        """Largest field id, ``-1`` for an empty schema."""
        return max(self._by_id, default=-1)

    def field_ids(self) -> list[int]:
        """All field ids in pre-order."""
        return [f.id for f in self.fields]

    def field(self, field_id: int) -> file_pb2.Field:
        """The field with this id (``KeyError`` if absent)."""
        return self._by_id[field_id]

    def children(self, field_id: int) -> list[file_pb2.Field]:
        """Direct children of a field, in order (``-1`` gives the top level)."""
        return list(self._children[field_id])

    def top_level(self) -> list[file_pb2.Field]:
        """Top-level fields in order."""
        return list(self._children[-1])

    def subtree_ids(self, field_id: int) -> list[int]:
        """The field and all its descendants, pre-order."""
        out = [field_id]
        for child in self._children[field_id]:
            out.extend(self.subtree_ids(child.id))
        return out

    def arrow_field(self, field_id: int) -> pa.Field:
        """Arrow field of one Lance field (with its children)."""
        f = self._by_id[field_id]
        kids = self._children[field_id]
        logical = f.logical_type
        if logical in _NESTED:
            dtype = self._nested_type(f, kids)
        elif logical.startswith(_FSL_PREFIX + "struct:"):
            if len(kids) != 1:
                raise InvalidInputError(f"field {f.name!r}: fixed_size_list of struct needs one child")
            dtype = pa.list_(self.arrow_field(kids[0].id), _parse_int(logical.rsplit(":", 1)[1], f))
        elif kids:
            raise InvalidInputError(f"field {f.name!r} of type {logical!r} cannot have children")
        else:
            try:
                dtype = _parse_leaf_logical_type(logical)
            except UnsupportedFeatureError as exc:
                raise UnsupportedFeatureError(f"field {f.name!r}: {exc}") from exc
            except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
                raise InvalidInputError(f"field {f.name!r}: malformed logical type {logical!r}") from exc
        metadata = dict(f.metadata)
        if logical == "json" and metadata.get(_EXTENSION_NAME) == JSON_EXTENSION:  # JSONB read as JSON text
            return pa.field(f.name, pa.json_(), f.nullable,
                            metadata={k: v for k, v in metadata.items() if k not in _EXTENSION_KEYS} or None)
        extension = _extension_type(dtype, metadata)
        if extension is not None:
            dtype = extension
            metadata = {k: v for k, v in metadata.items() if k not in _EXTENSION_KEYS}
        return pa.field(f.name, dtype, f.nullable, metadata=metadata or None)

    def _nested_type(self, f: file_pb2.Field, kids: list[file_pb2.Field]) -> pa.DataType:
        if f.logical_type == "struct":
            return pa.struct([self.arrow_field(k.id) for k in kids])
        if len(kids) != 1:
            raise InvalidInputError(f"list field {f.name!r} needs exactly one child, has {len(kids)}")
        item = self.arrow_field(kids[0].id)
        if f.logical_type == "map":  # a list of (key, value) entries, as pylance 14 stores maps
            if not pa.types.is_struct(item.type) or item.type.num_fields != 2 or item.type.field(0).nullable:
                raise InvalidInputError(f"map field {f.name!r} needs an entries struct of a non-null key and a value")
            return pa.map_(item.type.field(0), item.type.field(1))
        return pa.large_list(item) if f.logical_type.startswith("large_list") else pa.list_(item)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LanceSchema):
            return NotImplemented
        return self.fields == other.fields and self.metadata == other.metadata

    def __repr__(self) -> str:
        body = ", ".join(f"{f.id}:{f.name}:{f.logical_type}(parent {f.parent_id})" for f in self.fields)
        return f"LanceSchema([{body}])"

    # ------------------------------------------------------------------ derivation

    def project(self, columns: Sequence[str]) -> LanceSchema:
        """Schema of the named top-level columns, in the requested order, ids kept."""
        by_name = {f.name: f for f in self.top_level()}
        unknown = [c for c in columns if c not in by_name]
        if unknown:
            raise InvalidInputError(f"unknown column(s) {unknown}; available: {list(by_name)}")
        _check_unique_names(list(columns), "the projection")
        fields = [self._by_id[i] for c in columns for i in self.subtree_ids(by_name[c].id)]
        return LanceSchema(fields, self.metadata)

    def check_compatible(self, other: pa.Schema) -> None:
        """Raise ``SchemaMismatchError`` unless ``other`` can be appended.

        Fields match by name at every struct level (order may differ); logical
        types must be equal; nullability and metadata are not compared. The
        message names every missing, unexpected and differing field with both
        types.
        """
        try:
            incoming = LanceSchema.from_arrow(other)
        except UnsupportedFeatureError as exc:
            raise SchemaMismatchError(f"Append with different schema: {exc}") from exc
        problems: list[str] = []
        _compare(self, -1, incoming, -1, "", problems)
        if problems:
            raise SchemaMismatchError("Append with different schema: " + "; ".join(problems))

    def align(self, data: _Data) -> _Data:
        """Return ``data`` with this schema's column order and exact Arrow types.

        Raises ``SchemaMismatchError`` (see :meth:`check_compatible`). Columns are
        only cast where the Arrow types differ (e.g. a different field order in
        a struct, a fixed-size-list item name, a dictionary's ordered flag).
        """
        target = self.to_arrow()
        if data.schema.equals(target):
            return _with_schema(data, target)
        self.check_compatible(data.schema)
        columns = []
        for field in target:
            column = data.column(field.name)
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaMismatchError(f"cannot convert column {field.name!r} to {field.type}: {exc}") from exc
            columns.append(column)
        if isinstance(data, pa.Table):
            return pa.Table.from_arrays(columns, schema=target)
        return pa.RecordBatch.from_arrays(columns, schema=target)


def _with_schema(data: _Data, target: pa.Schema) -> _Data:
    """Same data under ``target`` (equal types; metadata taken from target)."""
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays(data.columns, schema=target)
    return pa.RecordBatch.from_arrays(data.columns, schema=target)


def _parse_int(text: str, f: file_pb2.Field) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise InvalidInputError(f"field {f.name!r}: malformed logical type {f.logical_type!r}") from exc


def _copy_field(f: file_pb2.Field) -> file_pb2.Field:
    out = file_pb2.Field()
    out.CopyFrom(f)
    return out


def _check_unique_names(names: list[str], where: str) -> None:
    dupes = sorted(name for name, count in Counter(names).items() if count > 1)
    if dupes:
        raise InvalidInputError(f"duplicate field name(s) {dupes} in {where}")


def _add_arrow_field(out: list[file_pb2.Field], field: pa.Field, parent_id: int, path: str) -> None:
    """Append ``field`` and its descendants to ``out`` in pre-order."""
    # (a Python extension type need not be hashable: pylance's bfloat16 is not)
    dtype = field.type if isinstance(field.type, pa.BaseExtensionType) else _VIEW_TYPES.get(field.type, field.type)
    f = file_pb2.Field(
        name=field.name,
        id=len(out),
        parent_id=parent_id,
        nullable=field.nullable,
        metadata=_encode_metadata(field.metadata, f"field {path!r}"),
        encoding=_legacy_encoding(dtype),
    )
    out.append(f)
    children: list[pa.Field] = []
    if isinstance(dtype, pa.BaseExtensionType):
        f.metadata.update(_extension_metadata(dtype, path))
        if dtype.extension_name == "arrow.json":
            f.logical_type = "json"
            f.encoding = _legacy_encoding(pa.large_binary())
            return
        dtype = dtype.storage_type
        f.encoding = _legacy_encoding(dtype)
    if pa.types.is_struct(dtype):
        f.logical_type = "struct"
        children = list(dtype)
        _check_unique_names([c.name for c in children], f"struct field {path!r}")
    elif pa.types.is_map(dtype):
        if dtype.keys_sorted:
            raise UnsupportedFeatureError(f"field {path!r}: maps with sorted keys (pylance stores maps unsorted)")
        f.logical_type = "map"
        children = [pa.field("entries", pa.struct([dtype.key_field, dtype.item_field]), nullable=False)]
    elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        base = "large_list" if pa.types.is_large_list(dtype) else "list"
        f.logical_type = base + (".struct" if pa.types.is_struct(dtype.value_type) else "")
        children = [dtype.value_field]
    elif pa.types.is_fixed_size_list(dtype) and pa.types.is_struct(dtype.value_type):
        f.logical_type = f"{_FSL_PREFIX}struct:{dtype.list_size}"
        children = [dtype.value_field]
    else:
        try:
            f.logical_type = _leaf_logical_type(dtype)
        except UnsupportedFeatureError as exc:
            raise UnsupportedFeatureError(f"field {path!r}: unsupported type {field.type}") from exc
    for child in children:
        _add_arrow_field(out, child, f.id, f"{path}.{child.name}")


def _compare(ours: LanceSchema, our_id: int, theirs: LanceSchema, their_id: int, prefix: str, out: list[str]) -> None:
    """Collect differences between the children of two fields (matched by name)."""
    mine = {f.name: f for f in ours.children(our_id)}
    other = {f.name: f for f in theirs.children(their_id)}
    for name, f in mine.items():
        path = prefix + name
        if name not in other:
            out.append(f"missing field `{path}` ({ours.arrow_field(f.id).type})")
            continue
        g = other[name]
        if f.logical_type != g.logical_type:
            out.append(
                f"`{path}` should have type {ours.arrow_field(f.id).type} "
                f"but type was {theirs.arrow_field(g.id).type}"
            )
        elif ours.children(f.id) or theirs.children(g.id):
            _compare(ours, f.id, theirs, g.id, path + ".", out)
    for name, g in other.items():
        if name not in mine:
            out.append(f"unexpected field `{prefix + name}` ({theirs.arrow_field(g.id).type})")
