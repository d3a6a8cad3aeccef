"""Transactions and operations as plain data, with their wire form.

A commit writes one ``Transaction`` to ``_transactions/{read_version}-{uuid}.txn``
before the manifest; concurrent writers (ours and pylance's) use these files
to decide whether their own commit is compatible. Operations carry pylance's
class and field names.
"""

from __future__ import annotations

import abc
import dataclasses
import uuid as uuid_lib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2, transaction_pb2
from airflow_lance.core.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.fragment import DataFile, FragmentMetadata
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore

COMMIT_MESSAGE_KEY = "__lance_commit_message"
IDEMPOTENCY_KEY = "airflow_lance.idempotency_key"


def _frags(pbs: Sequence[table_pb2.DataFragment]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_pb(pb) for pb in pbs]


def _as_lance_schema(schema: pa.Schema | LanceSchema) -> LanceSchema:
    return schema if isinstance(schema, LanceSchema) else LanceSchema.from_arrow(schema)


#: pylance 14's ``preserves_nullability`` flag (Merge field 4, Project field 2; not in our .proto):
#: the encoded ``true`` that is merged into, and looked for among, the message's unknown fields.
_PRESERVES_NULLABILITY = {"merge": b"\x20\x01", "project": b"\x10\x01"}


def _preserves_nullability(message: Any, kind: str) -> bool:
    number = _PRESERVES_NULLABILITY[kind][0] >> 3
    return any(u.field_number == number and u.data for u in UnknownFieldSet(message))


def _uuid_bytes(text: str) -> bytes:
    try:
        return uuid_lib.UUID(text).bytes
    except ValueError as exc:
        raise InvalidInputError(f"not a UUID: {text!r}") from exc


class LanceOperation:
    """Namespace of the operations a commit can perform (pylance's names)."""

    class BaseOperation(abc.ABC):
        """One operation; ``name`` is its field name in the Transaction oneof."""

        name: ClassVar[str]

        @abc.abstractmethod
        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            """Store this operation into ``txn``'s operation oneof."""

        def touched_fragment_ids(self) -> set[int]:
            """Ids of existing fragments this operation modifies or removes."""
            return set()

    @dataclasses.dataclass
    class Append(BaseOperation):
        """Add fragments (ids 0 are assigned at commit)."""

        fragments: Sequence[FragmentMetadata]
        name: ClassVar[str] = "append"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.append.fragments.extend(f.to_pb() for f in self.fragments)

    @dataclasses.dataclass
    class Overwrite(BaseOperation):
        """Replace the whole dataset (or create it) with a schema and fragments."""

        new_schema: pa.Schema | LanceSchema
        fragments: Sequence[FragmentMetadata]
        config_upsert_values: Mapping[str, str] | None = None
        name: ClassVar[str] = "overwrite"

        @property
        def lance_schema(self) -> LanceSchema:
            return _as_lance_schema(self.new_schema)

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            schema = self.lance_schema
            txn.overwrite.fragments.extend(f.to_pb() for f in self.fragments)
            txn.overwrite.schema.extend(schema.fields)
            for key, value in schema.metadata.items():
                txn.overwrite.schema_metadata[key] = value
            for key, value in (self.config_upsert_values or {}).items():
                txn.overwrite.config_upsert_values[key] = value

    @dataclasses.dataclass
    class Delete(BaseOperation):
        """Rows deleted: fragments with new deletion files, and fully deleted fragments."""

        updated_fragments: Sequence[FragmentMetadata]
        deleted_fragment_ids: Sequence[int]
        predicate: str
        name: ClassVar[str] = "delete"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.delete.updated_fragments.extend(f.to_pb() for f in self.updated_fragments)
            txn.delete.deleted_fragment_ids.extend(self.deleted_fragment_ids)
            txn.delete.predicate = self.predicate

        def touched_fragment_ids(self) -> set[int]:
            return {f.id for f in self.updated_fragments} | set(self.deleted_fragment_ids)

    @dataclasses.dataclass
    class Update(BaseOperation):
        """Rows rewritten: removed, updated and new fragments (pylance's update/merge_insert)."""

        removed_fragment_ids: Sequence[int] = ()
        updated_fragments: Sequence[FragmentMetadata] = ()
        new_fragments: Sequence[FragmentMetadata] = ()
        fields_modified: Sequence[int] = ()
        #: pylance's field: the updated fields (indices on other fields may cover the new fragments).
        fields_for_preserving_frag_bitmap: Sequence[int] = ()
        update_mode: str = "rewrite_rows"  # or "rewrite_columns" ("" is pylance's default: rewrite_rows)
        #: pylance's field for ``rewrite_columns`` updates over stable row ids (not supported here).
        updated_fragment_offsets: Mapping[int, bytes] | None = None
        #: pylance 14's ``inserted_rows``: keys a merge_insert on the primary key inserted
        #: (``core.key_filter.KeyExistenceFilter``); concurrent inserts of one key conflict.
        inserted_rows_filter: Any = None
        name: ClassVar[str] = "update"

        def __post_init__(self) -> None:
            if self.update_mode not in ("", "rewrite_rows", "rewrite_columns"):
                raise InvalidInputError(
                    f"update_mode must be 'rewrite_rows' or 'rewrite_columns', not {self.update_mode!r}")

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            if self.updated_fragment_offsets:
                raise UnsupportedFeatureError("LanceOperation.Update(updated_fragment_offsets=...) is not supported")
            txn.update.SetInParent()
            txn.update.removed_fragment_ids.extend(self.removed_fragment_ids)
            txn.update.updated_fragments.extend(f.to_pb() for f in self.updated_fragments)
            txn.update.new_fragments.extend(f.to_pb() for f in self.new_fragments)
            txn.update.fields_modified.extend(self.fields_modified)
            txn.update.fields_for_preserving_frag_bitmap.extend(self.fields_for_preserving_frag_bitmap)
            txn.update.update_mode = (
                transaction_pb2.Transaction.REWRITE_COLUMNS
                if self.update_mode == "rewrite_columns"
                else transaction_pb2.Transaction.REWRITE_ROWS
            )
            if self.inserted_rows_filter is not None:
                txn.update.inserted_rows.CopyFrom(self.inserted_rows_filter.to_pb())

        def touched_fragment_ids(self) -> set[int]:
            return {f.id for f in self.updated_fragments} | set(self.removed_fragment_ids)

    @dataclasses.dataclass
    class RewriteGroup:
        """Fragments replaced by new fragments holding the same rows."""

        old_fragments: Sequence[FragmentMetadata]
        new_fragments: Sequence[FragmentMetadata]

    @dataclasses.dataclass
    class RewrittenIndex:
        """An index rebuilt for the rewritten fragments (old uuid -> new uuid)."""

        old_id: str
        new_id: str
        new_details_type_url: str
        new_details_value: bytes
        new_index_version: int
        new_index_files: Sequence[table_pb2.IndexFile] = ()

    @dataclasses.dataclass
    class Rewrite(BaseOperation):
        """Compaction: groups of fragments rewritten without changing the data."""

        groups: Sequence[LanceOperation.RewriteGroup]
        rewritten_indices: Sequence[LanceOperation.RewrittenIndex] = ()
        name: ClassVar[str] = "rewrite"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            for group in self.groups:
                pb = txn.rewrite.groups.add()
                pb.old_fragments.extend(f.to_pb() for f in group.old_fragments)
                pb.new_fragments.extend(f.to_pb() for f in group.new_fragments)
            for index in self.rewritten_indices:
                pb = txn.rewrite.rewritten_indices.add()
                pb.old_id.uuid = _uuid_bytes(index.old_id)
                pb.new_id.uuid = _uuid_bytes(index.new_id)
                pb.new_index_details.CopyFrom(
                    any_pb2.Any(type_url=index.new_details_type_url, value=index.new_details_value)
                )
                pb.new_index_version = index.new_index_version
                pb.new_index_files.extend(index.new_index_files)

        def touched_fragment_ids(self) -> set[int]:
            return {f.id for group in self.groups for f in group.old_fragments}

    @dataclasses.dataclass
    class CreateIndex(BaseOperation):
        """Indices added and removed (``IndexMetadata`` messages): create, replace and drop."""

        new_indices: Sequence[table_pb2.IndexMetadata] = ()
        removed_indices: Sequence[table_pb2.IndexMetadata] = ()
        name: ClassVar[str] = "create_index"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.create_index.SetInParent()
            txn.create_index.new_indices.extend(self.new_indices)
            txn.create_index.removed_indices.extend(self.removed_indices)

    @dataclasses.dataclass
    class Merge(BaseOperation):
        """Columns added: the complete new fragment list and the new schema.

        ``preserves_nullability`` (pylance 14): every column it introduces is nullable, so
        concurrent appends may commit after it (their fragments read the new columns as null).
        """

        fragments: Sequence[FragmentMetadata]
        schema: pa.Schema | LanceSchema
        preserves_nullability: bool = False
        name: ClassVar[str] = "merge"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            schema = _as_lance_schema(self.schema)
            txn.merge.fragments.extend(f.to_pb() for f in self.fragments)
            txn.merge.schema.extend(schema.fields)
            for key, value in schema.metadata.items():
                txn.merge.schema_metadata[key] = value
            if self.preserves_nullability:
                txn.merge.MergeFromString(_PRESERVES_NULLABILITY[self.name])

        def touched_fragment_ids(self) -> set[int]:
            return {f.id for f in self.fragments}

    @dataclasses.dataclass
    class Project(BaseOperation):
        """Columns dropped or renamed: the new schema (a subset with the same ids)."""

        schema: LanceSchema
        preserves_nullability: bool = False
        name: ClassVar[str] = "project"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.project.schema.extend(self.schema.fields)
            if self.preserves_nullability:
                txn.project.MergeFromString(_PRESERVES_NULLABILITY[self.name])

    @dataclasses.dataclass
    class DataReplacementGroup:
        """A new data file for one fragment: it replaces the file holding exactly the same fields
        (and file version), or is added when the fragment stores none of them."""

        fragment_id: int
        new_file: DataFile

    @dataclasses.dataclass
    class DataReplacement(BaseOperation):
        """Replace (or backfill) one column group's data files in existing fragments."""

        replacements: Sequence[LanceOperation.DataReplacementGroup]
        name: ClassVar[str] = "data_replacement"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.data_replacement.SetInParent()
            for group in self.replacements:
                pb = txn.data_replacement.replacements.add(fragment_id=group.fragment_id)
                pb.new_file.CopyFrom(group.new_file.to_pb())

        def touched_fragment_ids(self) -> set[int]:
            return {group.fragment_id for group in self.replacements}

    @dataclasses.dataclass
    class Restore(BaseOperation):
        """Make an old version the latest again."""

        version: int
        name: ClassVar[str] = "restore"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.restore.version = self.version

    @dataclasses.dataclass
    class ReserveFragments(BaseOperation):
        """Reserve fragment ids (raises max_fragment_id) for a later Rewrite."""

        num_fragments: int
        name: ClassVar[str] = "reserve_fragments"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            txn.reserve_fragments.num_fragments = self.num_fragments

    @dataclasses.dataclass
    class UpdateMap:
        """Updates of a string map; a None value deletes the key."""

        updates: Mapping[str, str | None]
        replace: bool = False

        def write_pb(self, pb: transaction_pb2.Transaction.UpdateMap) -> None:
            for key, value in self.updates.items():
                entry = pb.update_entries.add(key=key)
                if value is not None:
                    entry.value = value
            pb.replace = self.replace

        @classmethod
        def from_pb(cls, pb: transaction_pb2.Transaction.UpdateMap) -> LanceOperation.UpdateMap:
            return cls({e.key: e.value if e.HasField("value") else None for e in pb.update_entries}, pb.replace)

        def apply(self, target: dict[str, str]) -> dict[str, str]:
            result = {} if self.replace else dict(target)
            for key, value in self.updates.items():
                if value is None:
                    result.pop(key, None)
                else:
                    result[key] = value
            return result

    @dataclasses.dataclass
    class UpdateConfig(BaseOperation):
        """Changes to table config, table metadata, schema metadata or field metadata."""

        config_updates: LanceOperation.UpdateMap | None = None
        table_metadata_updates: LanceOperation.UpdateMap | None = None
        schema_metadata_updates: LanceOperation.UpdateMap | None = None
        field_metadata_updates: Mapping[int, LanceOperation.UpdateMap] | None = None
        name: ClassVar[str] = "update_config"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            pb = txn.update_config
            pb.SetInParent()
            for attr in ("config_updates", "table_metadata_updates", "schema_metadata_updates"):
                update = getattr(self, attr)
                if update is not None:
                    update.write_pb(getattr(pb, attr))
            for field_id, update in (self.field_metadata_updates or {}).items():
                update.write_pb(pb.field_metadata_updates[field_id])

        def config_keys(self) -> set[str]:
            return set(self.config_updates.updates) if self.config_updates else set()

    @dataclasses.dataclass
    class Other(BaseOperation):
        """An operation read from a transaction file that we do not model.

        It is kept only so that conflict checks can treat it conservatively.
        """

        kind: str
        name: ClassVar[str] = "other"

        def write_pb(self, txn: transaction_pb2.Transaction) -> None:
            raise InvalidInputError(f"cannot commit an unmodelled {self.kind!r} operation")


def _update_config_from_pb(pb: transaction_pb2.Transaction.UpdateConfig) -> LanceOperation.UpdateConfig:
    def _map(name: str) -> LanceOperation.UpdateMap | None:
        return LanceOperation.UpdateMap.from_pb(getattr(pb, name)) if pb.HasField(name) else None

    config = _map("config_updates")
    if config is None and (pb.upsert_values or pb.delete_keys):  # the older wire form
        config = LanceOperation.UpdateMap({**dict(pb.upsert_values), **{k: None for k in pb.delete_keys}})
    schema_md = _map("schema_metadata_updates")
    if schema_md is None and pb.schema_metadata:
        schema_md = LanceOperation.UpdateMap(dict(pb.schema_metadata), replace=True)
    fields = {fid: LanceOperation.UpdateMap.from_pb(u) for fid, u in pb.field_metadata_updates.items()}
    for fid, legacy in pb.field_metadata.items():
        fields.setdefault(fid, LanceOperation.UpdateMap(dict(legacy.metadata), replace=True))
    return LanceOperation.UpdateConfig(config, _map("table_metadata_updates"), schema_md, fields or None)


def _rewrite_from_pb(pb: transaction_pb2.Transaction.Rewrite) -> LanceOperation.Rewrite:
    groups = [LanceOperation.RewriteGroup(_frags(g.old_fragments), _frags(g.new_fragments)) for g in pb.groups]
    if not groups and (pb.old_fragments or pb.new_fragments):  # deprecated ungrouped form
        groups = [LanceOperation.RewriteGroup(_frags(pb.old_fragments), _frags(pb.new_fragments))]
    indices = [
        LanceOperation.RewrittenIndex(
            str(uuid_lib.UUID(bytes=i.old_id.uuid)),
            str(uuid_lib.UUID(bytes=i.new_id.uuid)),
            i.new_index_details.type_url,
            i.new_index_details.value,
            i.new_index_version,
            list(i.new_index_files),
        )
        for i in pb.rewritten_indices
    ]
    return LanceOperation.Rewrite(groups, indices)


def _key_filter(update: transaction_pb2.Transaction.Update) -> Any:
    if not update.HasField("inserted_rows"):
        return None
    from airflow_lance.core.key_filter import KeyExistenceFilter

    return KeyExistenceFilter.from_pb(update.inserted_rows)


_DECODERS: dict[str, Callable[[transaction_pb2.Transaction], LanceOperation.BaseOperation]] = {
    "append": lambda t: LanceOperation.Append(_frags(t.append.fragments)),
    "overwrite": lambda t: LanceOperation.Overwrite(
        LanceSchema.from_fields(list(t.overwrite.schema), dict(t.overwrite.schema_metadata)),
        _frags(t.overwrite.fragments),
        dict(t.overwrite.config_upsert_values),
    ),
    "delete": lambda t: LanceOperation.Delete(
        _frags(t.delete.updated_fragments), list(t.delete.deleted_fragment_ids), t.delete.predicate
    ),
    "update": lambda t: LanceOperation.Update(
        removed_fragment_ids=list(t.update.removed_fragment_ids),
        updated_fragments=_frags(t.update.updated_fragments),
        new_fragments=_frags(t.update.new_fragments),
        fields_modified=list(t.update.fields_modified),
        fields_for_preserving_frag_bitmap=list(t.update.fields_for_preserving_frag_bitmap),
        update_mode=(
            "rewrite_columns" if t.update.update_mode == transaction_pb2.Transaction.REWRITE_COLUMNS else "rewrite_rows"
        ),
        inserted_rows_filter=_key_filter(t.update),
    ),
    "rewrite": lambda t: _rewrite_from_pb(t.rewrite),
    "create_index": lambda t: LanceOperation.CreateIndex(
        list(t.create_index.new_indices), list(t.create_index.removed_indices)
    ),
    "merge": lambda t: LanceOperation.Merge(
        _frags(t.merge.fragments), LanceSchema.from_fields(list(t.merge.schema), dict(t.merge.schema_metadata)),
        _preserves_nullability(t.merge, "merge"),
    ),
    "project": lambda t: LanceOperation.Project(
        LanceSchema.from_fields(list(t.project.schema), {}), _preserves_nullability(t.project, "project")
    ),
    "restore": lambda t: LanceOperation.Restore(t.restore.version),
    "data_replacement": lambda t: LanceOperation.DataReplacement([
        LanceOperation.DataReplacementGroup(r.fragment_id, DataFile.from_pb(r.new_file))
        for r in t.data_replacement.replacements
    ]),
    "reserve_fragments": lambda t: LanceOperation.ReserveFragments(t.reserve_fragments.num_fragments),
    "update_config": lambda t: _update_config_from_pb(t.update_config),
}


@dataclasses.dataclass
class Transaction:
    """A transaction: what was read, what is done, and free-form properties."""

    read_version: int
    operation: LanceOperation.BaseOperation
    uuid: str = dataclasses.field(default_factory=lambda: str(uuid_lib.uuid4()))
    transaction_properties: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The wire message this was parsed from, if any.
    raw: transaction_pb2.Transaction | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def file_name(self) -> str:
        return layout.transaction_file_name(self.read_version, self.uuid)

    @property
    def kind(self) -> str:
        """Wire name of the operation (``append``, ``delete``, ...; unknown ones as read)."""
        if isinstance(self.operation, LanceOperation.Other):
            return self.operation.kind
        return self.operation.name

    def to_pb(self) -> transaction_pb2.Transaction:
        txn = transaction_pb2.Transaction(read_version=self.read_version, uuid=self.uuid)
        for key, value in self.transaction_properties.items():
            txn.transaction_properties[key] = value
        self.operation.write_pb(txn)
        return txn

    @classmethod
    def from_pb(cls, txn: transaction_pb2.Transaction) -> Transaction:
        kind = txn.WhichOneof("operation")
        decoder = _DECODERS.get(kind or "")
        operation = decoder(txn) if decoder else LanceOperation.Other(kind or "unknown")
        return cls(txn.read_version, operation, txn.uuid, dict(txn.transaction_properties), raw=txn)


def build_properties(
    commit_message: str | None,
    transaction_properties: Mapping[str, str] | None,
    idempotency_key: str | None = None,
) -> dict[str, str]:
    """Merge user properties, the commit message (pylance's key) and an idempotency key."""
    props = {str(k): str(v) for k, v in (transaction_properties or {}).items()}
    if commit_message is not None:
        props[COMMIT_MESSAGE_KEY] = commit_message
    if idempotency_key is not None:
        props[IDEMPOTENCY_KEY] = idempotency_key
    return props


def write_transaction_file(store: ObjectStore, transaction: Transaction) -> str:
    """Write the ``.txn`` file; return its name (for ``Manifest.transaction_file``)."""
    name = transaction.file_name
    store.write(layout.transaction_file_path(name), transaction.to_pb().SerializeToString())
    return name


def read_transaction_file(store: ObjectStore, name: str) -> Transaction:
    """Read a committed transaction by its ``Manifest.transaction_file`` name."""
    path = layout.transaction_file_path(name)
    data = store.read(path)
    txn = transaction_pb2.Transaction()
    try:
        txn.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(path, f"transaction protobuf does not decode: {exc}") from exc
    return Transaction.from_pb(txn)
