"""Build the next manifest from a base manifest and an operation (pure functions).

One small handler per operation; none of them writes to storage. Everything
the operation does not own is copied forward: config, table metadata, base
paths, the index section (with fragment bitmaps adjusted when fragments are
removed or rewritten) and unknown protobuf fields.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid as uuid_lib
from collections.abc import Callable, Iterable

import numpy as np
import pyroaring
from google.protobuf import timestamp_pb2

import airflow_lance
from airflow_lance.core import feature_flags, layout, rowids
from airflow_lance.core._proto import rowids_pb2, table_pb2
from airflow_lance.core.errors import (
    DatasetNotFoundError,
    IncompatibleTransactionError,
    InvalidInputError,
    SchemaMismatchError,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.indices.metadata import (
    ROW_ID_TYPES,
    SYSTEM_INDEX_NAMES,
    UNTOUCHED_BY_REWRITE,
    fragment_bitmap,
)
from airflow_lance.core.manifest import ManifestFile, data_storage_version, file_storage_version, next_fragment_id
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.transaction import LanceOperation

# New datasets' data storage version is chosen in core.write (an Overwrite without fragments uses it too).
from airflow_lance.core.write import DEFAULT_STORAGE_VERSION as DEFAULT_DATA_STORAGE_VERSION

WRITER_LIBRARY = layout.WRITER_LIBRARY


@dataclasses.dataclass
class NextManifest:
    """A manifest ready to frame: the message and the raw index section to carry."""

    manifest: table_pb2.Manifest
    index_section: bytes | None


@dataclasses.dataclass
class ApplyContext:
    """What a handler may need besides the base manifest."""

    transaction_file: str
    load_manifest: Callable[[int], ManifestFile]
    #: A new dataset (an Overwrite with no base) gets stable row ids (``enable_stable_row_ids``).
    enable_stable_row_ids: bool = False


def _timestamp_now() -> timestamp_pb2.Timestamp:
    now = time.time_ns()
    return timestamp_pb2.Timestamp(seconds=now // 1_000_000_000, nanos=now % 1_000_000_000)


def _has_stable_row_ids(manifest: table_pb2.Manifest | None) -> bool:
    return manifest is not None and bool(manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)


def _new_fragments(
    fragments: Iterable[FragmentMetadata], base: table_pb2.Manifest | None, target: table_pb2.Manifest,
    stable_row_ids: bool = False,
) -> list[table_pb2.DataFragment]:
    """Give unassigned fragments ids above max_fragment_id, and row ids when the dataset has them
    (or, for a new dataset, when ``stable_row_ids``)."""
    next_id = next_fragment_id(base)
    out = []
    for fragment in fragments:
        pb = fragment.to_pb()
        if pb.id == 0:
            pb.id = next_id
            next_id += 1
        if (stable_row_ids or _has_stable_row_ids(base)) and pb.WhichOneof("row_id_sequence") is None:
            sequence = rowids_pb2.RowIdSequence()
            sequence.segments.add().range.CopyFrom(
                rowids_pb2.U64Segment.Range(start=target.next_row_id, end=target.next_row_id + pb.physical_rows)
            )
            pb.inline_row_ids = sequence.SerializeToString()
            target.next_row_id += pb.physical_rows
            # new rows are created and last updated by this version, as pylance records them
            stamp = rowids.encode_versions(np.full(pb.physical_rows, _next_version(base), dtype=np.uint64))
            for inline, external in (rowids.CREATED_AT_FIELDS, rowids.LAST_UPDATED_FIELDS):
                if not pb.HasField(inline) and not pb.HasField(external):
                    setattr(pb, inline, stamp)
        out.append(pb)
    return out


def _next_version(base: table_pb2.Manifest | None) -> int:
    return (base.version if base is not None else 0) + 1


def _format_version(fragments: Iterable[FragmentMetadata], base: table_pb2.Manifest | None) -> str:
    versions = {file_storage_version(f.file_major_version, f.file_minor_version)
                for frag in fragments for f in frag.files}
    if len(versions) > 1:
        raise InvalidInputError(f"fragments mix data file versions {sorted(versions)}")
    if versions:
        return versions.pop()
    if base is not None:
        return data_storage_version(base)
    return DEFAULT_DATA_STORAGE_VERSION


def _check_format(fragments: list[FragmentMetadata], base: table_pb2.Manifest) -> None:
    version, existing = _format_version(fragments, base), data_storage_version(base)
    if fragments and version != existing:
        raise InvalidInputError(f"fragments use data storage version {version} but the dataset uses {existing}")


def _finish(
    manifest: table_pb2.Manifest, base: table_pb2.Manifest | None, ctx: ApplyContext, new_reader_flags: int = 0
) -> None:
    """Fields every commit sets: version, time, writer, transaction, flags, max id; fragments in id order.

    Lance keeps a manifest's fragments sorted by id (pylance's ``validate`` checks it) and sorts them
    after every operation: a compaction's new fragments carry ids reserved before its commit, so a
    concurrent append may have taken higher ids, and appending the new fragments would break the order.
    """
    ids = [f.id for f in manifest.fragments]
    if any(a > b for a, b in itertools.pairwise(ids)):
        manifest.fragments.sort(key=lambda f: f.id)
    manifest.version = (base.version if base is not None else 0) + 1
    manifest.timestamp.CopyFrom(_timestamp_now())
    manifest.writer_version.Clear()
    manifest.writer_version.library = WRITER_LIBRARY
    manifest.writer_version.version = airflow_lance.__version__
    manifest.transaction_file = ctx.transaction_file
    previous_max = base.max_fragment_id if base is not None and base.HasField("max_fragment_id") else None
    # The handler may have raised max_fragment_id itself (ReserveFragments): never lower it.
    own_max = manifest.max_fragment_id if manifest.HasField("max_fragment_id") else None
    candidates = [
        v for v in (max((f.id for f in manifest.fragments), default=None), previous_max, own_max) if v is not None
    ]
    if candidates:
        manifest.max_fragment_id = max(candidates)
    if not manifest.data_format.version:  # written by pylance <= 0.15: record what Lance infers
        manifest.data_format.file_format = "lance"
        manifest.data_format.version = data_storage_version(base if base is not None else manifest)
    feature_flags.apply_feature_flags(
        manifest,
        (base.reader_feature_flags if base is not None else 0) | new_reader_flags,
        base.writer_feature_flags if base is not None else 0,
    )


def _copy_base(base: ManifestFile | None, what: str) -> table_pb2.Manifest:
    if base is None:
        raise DatasetNotFoundError(f"cannot {what}: the dataset does not exist")
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(base.manifest)
    return manifest


# -- index section -----------------------------------------------------------------------------


def _edit_index_bitmaps(
    index_section: bytes | None,
    edit: Callable[[table_pb2.IndexMetadata, pyroaring.BitMap], pyroaring.BitMap],
) -> bytes | None:
    """Apply ``edit`` to every index's fragment bitmap; re-serialise only when something changed."""
    if not index_section:
        return index_section
    section = table_pb2.IndexSection()
    section.ParseFromString(index_section)
    changed = False
    for index in section.indices:
        bitmap = pyroaring.BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else pyroaring.BitMap()
        edited = edit(index, bitmap)
        if edited != bitmap:
            index.fragment_bitmap = edited.serialize()
            changed = True
    return section.SerializeToString() if changed else index_section


def _prune_updated_fields(index_section: bytes | None, updated: set[int], fields_modified: set[int]
                          ) -> bytes | None:
    """As Lance: fragments whose values of ``fields_modified`` changed in place leave the bitmaps of the
    indices on those fields (they are searched unindexed until the index is optimised)."""
    if not updated or not fields_modified:
        return index_section
    return _edit_index_bitmaps(
        index_section,
        lambda index, bitmap: bitmap - pyroaring.BitMap(updated) if set(index.fields) & fields_modified else bitmap,
    )


def _retain_relevant_indices(index_section: bytes | None, manifest: table_pb2.Manifest) -> bytes | None:
    """pylance 14's retention after rows leave (Delete, Update): fragment bitmaps are immutable (they name
    the fragments the index holds rows of, existing or not, so that readers mask the rows of removed
    fragments); of several segments of one name, those covering no existing fragment go while another
    covers one, else only the oldest stays; a single segment always stays."""
    if not index_section:
        return index_section
    section = table_pb2.IndexSection()
    section.ParseFromString(index_section)
    existing = pyroaring.BitMap(f.id for f in manifest.fragments)

    def empty(index: table_pb2.IndexMetadata) -> bool:
        return not index.fragment_bitmap or not (fragment_bitmap(index) & existing)

    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in section.indices:
        if index.name not in SYSTEM_INDEX_NAMES:
            by_name.setdefault(index.name, []).append(index)
    keep: set[bytes] = set()
    for segments in by_name.values():
        full = [s for s in segments if not empty(s)]
        if full:
            keep.update(s.uuid.uuid for s in full)
            continue
        keep.add(min(segments, key=lambda s: s.dataset_version).uuid.uuid)  # the first, if several are
    kept = [i for i in section.indices if i.name in SYSTEM_INDEX_NAMES or i.uuid.uuid in keep]
    if len(kept) == len(section.indices):
        return index_section
    return table_pb2.IndexSection(indices=kept).SerializeToString() if kept else None


# -- handlers ----------------------------------------------------------------------------------


def _apply_append(op: LanceOperation.Append, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "append")
    assert base is not None
    fragments = list(op.fragments)
    _check_format(fragments, base.manifest)
    manifest.fragments.extend(_new_fragments(fragments, base.manifest, manifest))
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, base.index_section)


def _apply_overwrite(op: LanceOperation.Overwrite, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    schema = op.lance_schema
    fragments = list(op.fragments)
    previous = base.manifest if base is not None else None
    manifest = table_pb2.Manifest()
    if previous is not None:
        manifest.config.update(previous.config)
        manifest.table_metadata.update(previous.table_metadata)
        manifest.base_paths.extend(previous.base_paths)
        manifest.next_row_id = previous.next_row_id
    manifest.config.update(op.config_upsert_values or {})
    manifest.fields.extend(schema.fields)
    for key, value in schema.metadata.items():
        manifest.schema_metadata[key] = value
    # Stable row ids are chosen when a dataset is created; an overwrite keeps the dataset's choice.
    new_stable = previous is None and ctx.enable_stable_row_ids
    manifest.fragments.extend(_new_fragments(fragments, previous, manifest, new_stable))
    manifest.data_format.file_format = "lance"
    manifest.data_format.version = _format_version(fragments, previous)
    _finish(manifest, previous, ctx, feature_flags.STABLE_ROW_IDS if new_stable else 0)
    # An overwrite replaces the data: indices of the old data no longer apply.
    return NextManifest(manifest, None)


def _replace_fragments(
    manifest: table_pb2.Manifest, updated: Iterable[FragmentMetadata], removed: Iterable[int], what: str
) -> None:
    by_id = {f.id: f for f in updated}
    removed = set(removed)
    present = {f.id for f in manifest.fragments}
    missing = (set(by_id) | removed) - present
    if missing:
        raise IncompatibleTransactionError(f"{what} touches fragments {sorted(missing)} that no longer exist")
    kept = []
    for fragment in manifest.fragments:
        if fragment.id in removed:
            continue
        replacement = by_id.get(fragment.id)
        if replacement is not None:
            new = replacement.to_pb()
            # Keep what the operation does not carry (row-id sequences written by others).
            merged = table_pb2.DataFragment()
            merged.CopyFrom(fragment)
            merged.MergeFrom(new)
            del merged.files[:]
            merged.files.extend(new.files)
            if new.HasField("deletion_file"):  # whole: a merge would keep the old file's base_id
                merged.deletion_file.CopyFrom(new.deletion_file)
            else:
                merged.ClearField("deletion_file")
            fragment = merged
        kept.append(fragment)
    del manifest.fragments[:]
    manifest.fragments.extend(kept)


def _apply_delete(op: LanceOperation.Delete, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "delete")
    assert base is not None
    _replace_fragments(manifest, op.updated_fragments, op.deleted_fragment_ids, "delete")
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, _retain_relevant_indices(base.index_section, manifest))


def _stamp_moved_rows(fragment: FragmentMetadata, version: int, manifest: table_pb2.Manifest) -> FragmentMetadata:
    """Row ids and version sequences of an Update's new fragment (moved rows keep their ids)."""
    pb = fragment.to_pb()
    manifest.next_row_id = rowids.stamp_new_fragment(pb, version, manifest.next_row_id)
    return FragmentMetadata.from_pb(pb)


def _apply_update(op: LanceOperation.Update, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "update")
    assert base is not None
    _replace_fragments(manifest, op.updated_fragments, op.removed_fragment_ids, "update")
    new_fragments = list(op.new_fragments)
    if _has_stable_row_ids(base.manifest) and op.update_mode != "rewrite_columns":
        new_fragments = [_stamp_moved_rows(f, base.manifest.version + 1, manifest) for f in new_fragments]
    manifest.fragments.extend(_new_fragments(new_fragments, base.manifest, manifest))
    _finish(manifest, base.manifest, ctx)
    pruned = _prune_updated_fields(base.index_section, {f.id for f in op.updated_fragments}, set(op.fields_modified))
    return NextManifest(manifest, _retain_relevant_indices(pruned, manifest))


def _apply_rewrite(op: LanceOperation.Rewrite, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "rewrite")
    assert base is not None
    position = {f.id: i for i, f in enumerate(manifest.fragments)}
    fragments: list[table_pb2.DataFragment | None] = list(manifest.fragments)
    added: list[table_pb2.DataFragment] = []
    replaced: list[tuple[set[int], list[int]]] = []
    next_id = next_fragment_id(base.manifest)
    for group in op.groups:
        old_ids = [f.id for f in group.old_fragments]
        missing = [i for i in old_ids if i not in position]
        if missing or not old_ids:
            raise IncompatibleTransactionError(f"rewrite of fragments {missing or old_ids} that no longer exist")
        for old in group.old_fragments:  # a concurrent delete would have changed this
            current = FragmentMetadata.from_pb(manifest.fragments[position[old.id]])
            if current.deletion_file != old.deletion_file:
                raise IncompatibleTransactionError(f"fragment {old.id} changed since the rewrite was planned")
        new_pbs = []
        for fragment in group.new_fragments:
            pb = fragment.to_pb()
            if _has_stable_row_ids(base.manifest) and pb.WhichOneof("row_id_sequence") is None:
                raise InvalidInputError(
                    "rewritten fragments of a dataset with stable row ids must carry the row ids they keep"
                )
            if pb.id == 0:
                pb.id = next_id
                next_id += 1
            new_pbs.append(pb)
        for i in old_ids:
            fragments[position[i]] = None
        added.extend(new_pbs)
        replaced.append((set(old_ids), [pb.id for pb in new_pbs]))
    # The fragments kept, then the new ones, group by group; _finish sorts them by id as Lance does.
    del manifest.fragments[:]
    manifest.fragments.extend(f for f in fragments if f is not None)
    manifest.fragments.extend(added)
    remapped = {i.old_id: i for i in op.rewritten_indices}
    stable = _has_stable_row_ids(base.manifest)

    def edit(index: table_pb2.IndexMetadata, bitmap: pyroaring.BitMap) -> pyroaring.BitMap:
        if index.index_details.type_url in UNTOUCHED_BY_REWRITE and not stable:
            return bitmap  # as pylance 14, which (only) with stable row ids drops the rewritten fragments
        remap = remapped.get(str(uuid_lib.UUID(bytes=index.uuid.uuid))) if index.uuid.uuid else None
        if remap is not None:
            index.uuid.uuid = uuid_lib.UUID(remap.new_id).bytes
            index.index_details.type_url = remap.new_details_type_url
            index.index_details.value = remap.new_details_value
            index.index_version = remap.new_index_version
            index.ClearField("base_id")  # the remapped files are written to this dataset, not the index's base
            if remap.new_index_files:
                del index.files[:]
                index.files.extend(remap.new_index_files)
        result = pyroaring.BitMap(bitmap)
        for old_ids, new_ids in replaced:
            inside = old_ids <= set(bitmap)
            result -= pyroaring.BitMap(old_ids)
            # The index still covers the rows only if it was remapped, or (stable row ids) if it
            # holds row ids (ROW_ID_TYPES: pylance 14's BITMAP, LABEL_LIST, NGRAM, INVERTED and every
            # IVF index there); its BTREE holds row addresses (fragment << 32 | offset) also there
            # and is remapped on compaction.
            if inside and (remap is not None or (stable and index.index_details.type_url in ROW_ID_TYPES)):
                result |= pyroaring.BitMap(new_ids)
        return result

    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, _edit_index_bitmaps(base.index_section, edit))


def _apply_merge(op: LanceOperation.Merge, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "merge")
    assert base is not None
    lance_schema = op.schema if isinstance(op.schema, LanceSchema) else LanceSchema.from_arrow(op.schema)
    # A Merge may replace fields under new ids (alter_columns' casts), as Lance's does.
    del manifest.fields[:]
    manifest.fields.extend(lance_schema.fields)
    manifest.schema_metadata.clear()
    for key, value in lance_schema.metadata.items():
        manifest.schema_metadata[key] = value
    # Merge carries the complete fragment list; fragments with id 0 are new, unless the
    # dataset has a fragment 0 (then it is that one, as in every Merge pylance writes).
    existing = {f.id for f in base.manifest.fragments}
    row_ids = {f.id: f for f in base.manifest.fragments if f.WhichOneof("row_id_sequence")}
    del manifest.fragments[:]
    for fragment in op.fragments:
        if fragment.id != 0 or 0 in existing:
            pb = fragment.to_pb()
            if pb.WhichOneof("row_id_sequence") is None and pb.id in row_ids:  # fragments from JSON lack them
                source = row_ids[pb.id]
                if source.WhichOneof("row_id_sequence") == "inline_row_ids":
                    pb.inline_row_ids = source.inline_row_ids
                else:
                    pb.external_row_ids.CopyFrom(source.external_row_ids)
            manifest.fragments.append(pb)
    manifest.fragments.extend(
        _new_fragments([f for f in op.fragments if f.id == 0 and 0 not in existing], base.manifest, manifest))
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, _indices_on(base.index_section, set(lance_schema.field_ids())))


def _indices_on(section: bytes | None, kept: set[int]) -> bytes | None:
    """``section`` without the indices on a field no longer in the schema (dropped, or cast to a new
    field id by a Merge planned before the index was committed): pylance 14 leaves them out, and one
    left in breaks every filtered scan in pylance."""
    if not section:
        return section
    parsed = table_pb2.IndexSection()
    parsed.ParseFromString(section)
    survivors = [i for i in parsed.indices if set(i.fields) <= kept]
    if len(survivors) == len(parsed.indices):
        return section
    return table_pb2.IndexSection(indices=survivors).SerializeToString() if survivors else None


def _apply_data_replacement(
    op: LanceOperation.DataReplacement, base: ManifestFile | None, ctx: ApplyContext
) -> NextManifest:
    """Lance's rule: the new file replaces the fragment's file with the same fields and file
    version, or is added when the fragment stores none of its fields; anything else is refused."""
    manifest = _copy_base(base, "replace data")
    assert base is not None
    if len({tuple(g.new_file.fields) for g in op.replacements}) > 1:
        raise InvalidInputError("All new data files must have the same fields")
    position = {f.id: i for i, f in enumerate(manifest.fragments)}
    for group in op.replacements:
        if group.fragment_id not in position:
            raise IncompatibleTransactionError(f"fragment {group.fragment_id} being replaced does not exist")
        fragment = manifest.fragments[position[group.fragment_id]]
        new = group.new_file.to_pb()
        changed, covered = False, set()
        for data_file in fragment.files:
            if (list(data_file.fields) == list(new.fields) and data_file.file_major_version == new.file_major_version
                    and data_file.file_minor_version == new.file_minor_version):
                data_file.path, data_file.file_size_bytes, changed = new.path, new.file_size_bytes, True
            covered.update(data_file.fields)
        if not covered & set(new.fields):
            fragment.files.append(new)
            changed = True
        if not changed:
            raise InvalidInputError(f"the new data file of fragment {group.fragment_id} does not align with any "
                                    "existing data file (fields and file version must match)")
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, base.index_section)


def _apply_project(op: LanceOperation.Project, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "project")
    assert base is not None
    unknown = set(op.schema.field_ids()) - {f.id for f in base.manifest.fields}
    if unknown:
        raise SchemaMismatchError(f"project refers to unknown field ids {sorted(unknown)}")
    del manifest.fields[:]
    manifest.fields.extend(op.schema.fields)
    kept = set(op.schema.field_ids())
    for fragment in manifest.fragments:  # as pylance 14: files holding no field of the schema leave
        files = [f for f in fragment.files if kept & set(f.fields)]
        if files and len(files) != len(fragment.files):
            del fragment.files[:]
            fragment.files.extend(files)
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, _indices_on(base.index_section, kept))


def _apply_restore(op: LanceOperation.Restore, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    if base is None:
        raise DatasetNotFoundError("cannot restore: the dataset does not exist")
    old = ctx.load_manifest(op.version)
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(old.manifest)
    manifest.next_row_id = max(old.manifest.next_row_id, base.manifest.next_row_id)
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, old.index_section)


def _apply_reserve(op: LanceOperation.ReserveFragments, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    manifest = _copy_base(base, "reserve fragment ids")
    assert base is not None
    if op.num_fragments <= 0:
        raise InvalidInputError("num_fragments must be positive")
    manifest.max_fragment_id = next_fragment_id(base.manifest) + op.num_fragments - 1
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, base.index_section)


def _apply_update_config(
    op: LanceOperation.UpdateConfig, base: ManifestFile | None, ctx: ApplyContext
) -> NextManifest:
    manifest = _copy_base(base, "update the config")
    assert base is not None
    for attr, target in (("config_updates", "config"), ("table_metadata_updates", "table_metadata")):
        update = getattr(op, attr)
        if update is not None:
            new = update.apply(dict(getattr(manifest, target)))
            getattr(manifest, target).clear()
            getattr(manifest, target).update(new)
    if op.schema_metadata_updates is not None:
        current = {k: v.decode("utf-8", "replace") for k, v in manifest.schema_metadata.items()}
        new_md = op.schema_metadata_updates.apply(current)
        manifest.schema_metadata.clear()
        for key, value in new_md.items():
            manifest.schema_metadata[key] = value.encode()
    for field_id, update in (op.field_metadata_updates or {}).items():
        field = next((f for f in manifest.fields if f.id == field_id), None)
        if field is None:
            raise SchemaMismatchError(f"no field with id {field_id}")
        current = {k: v.decode("utf-8", "replace") for k, v in field.metadata.items()}
        new_md = update.apply(current)
        field.metadata.clear()
        for key, value in new_md.items():
            field.metadata[key] = value.encode()
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, base.index_section)


def _apply_create_index(op: LanceOperation.CreateIndex, base: ManifestFile | None, ctx: ApplyContext) -> NextManifest:
    """pylance's CreateIndex: drop ``removed_indices`` (by uuid), add ``new_indices`` with their
    fragment bitmaps as built; no index left means no index section.

    A fragment a concurrent delete removed stays in the new index's bitmap, as pylance 14 keeps it:
    the index holds that fragment's rows, and a bitmap fragment missing from the manifest is how
    readers know to mask them (without it, pylance's vector searches return those rows' entries,
    which read back as nothing, and give fewer than k rows)."""
    manifest = _copy_base(base, "create an index")
    assert base is not None
    section = table_pb2.IndexSection()
    if base.index_section:
        section.ParseFromString(base.index_section)
    removed = {index.uuid.uuid for index in op.removed_indices}
    kept = [index for index in section.indices if index.uuid.uuid not in removed]
    kept.extend(op.new_indices)
    _finish(manifest, base.manifest, ctx)
    return NextManifest(manifest, table_pb2.IndexSection(indices=kept).SerializeToString() if kept else None)


_HANDLERS: dict[type, Callable[..., NextManifest]] = {
    LanceOperation.Append: _apply_append,
    LanceOperation.Overwrite: _apply_overwrite,
    LanceOperation.Delete: _apply_delete,
    LanceOperation.Update: _apply_update,
    LanceOperation.Rewrite: _apply_rewrite,
    LanceOperation.Merge: _apply_merge,
    LanceOperation.Project: _apply_project,
    LanceOperation.DataReplacement: _apply_data_replacement,
    LanceOperation.Restore: _apply_restore,
    LanceOperation.ReserveFragments: _apply_reserve,
    LanceOperation.UpdateConfig: _apply_update_config,
    LanceOperation.CreateIndex: _apply_create_index,
}


def build_next_manifest(
    operation: LanceOperation.BaseOperation, base: ManifestFile | None, ctx: ApplyContext
) -> NextManifest:
    """The manifest of the version after ``base`` with ``operation`` applied."""
    handler = _HANDLERS.get(type(operation))
    if handler is None:
        raise InvalidInputError(f"operation {type(operation).__name__} cannot be committed")
    return handler(operation, base, ctx)
