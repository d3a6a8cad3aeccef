"""Stable row ids and row version sequences of fragments (``rowids.proto``).

Datasets created with stable row ids give every fragment a ``RowIdSequence``:
the row id of each physical row, as a list of segments (format notes 3.7, 12).
Compaction moves rows, so it must carry each surviving row's id (and its
created/last-updated versions) into the new fragment. Everything here works
on whole numpy arrays; loops run over segments, never over rows.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from airflow_lance.core._proto import rowids_pb2, table_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.storage import ObjectStore

_U16_MAX = (1 << 16) - 1
_U32_MAX = (1 << 32) - 1
_SEGMENT_OVERHEAD = 24  # Lance's size estimate of a segment, in bytes


# -- EncodedU64Array ---------------------------------------------------------------------------


def _decode_array(pb: rowids_pb2.EncodedU64Array, what: str) -> np.ndarray:
    kind = pb.WhichOneof("array")
    try:
        if kind == "u16_array":
            return np.frombuffer(pb.u16_array.offsets, dtype="<u2").astype(np.uint64) + np.uint64(pb.u16_array.base)
        if kind == "u32_array":
            return np.frombuffer(pb.u32_array.offsets, dtype="<u4").astype(np.uint64) + np.uint64(pb.u32_array.base)
        if kind == "u64_array":
            return np.frombuffer(pb.u64_array.values, dtype="<u8").astype(np.uint64)
    except ValueError as exc:
        raise CorruptFileError(what, f"malformed encoded u64 array: {exc}") from exc
    if kind is None:
        return np.empty(0, dtype=np.uint64)
    raise CorruptFileError(what, f"unknown encoded u64 array kind {kind!r}")


def _encode_array(values: np.ndarray) -> rowids_pb2.EncodedU64Array:
    """Lance's choice: u16 or u32 offsets from the minimum when they fit, else raw u64."""
    pb = rowids_pb2.EncodedU64Array()
    if not values.size:
        pb.u64_array.values = b""
        return pb
    low, high = int(values.min()), int(values.max())
    if high - low <= _U16_MAX:
        pb.u16_array.base = low
        pb.u16_array.offsets = (values - np.uint64(low)).astype("<u2").tobytes()
    elif high - low <= _U32_MAX:
        pb.u32_array.base = low
        pb.u32_array.offsets = (values - np.uint64(low)).astype("<u4").tobytes()
    else:
        pb.u64_array.values = values.astype("<u8").tobytes()
    return pb


# -- U64Segment --------------------------------------------------------------------------------


def decode_segment(pb: rowids_pb2.U64Segment, what: str = "row id sequence") -> np.ndarray:
    """The values of one segment, in order (uint64)."""
    kind = pb.WhichOneof("segment")
    if kind == "range":
        if pb.range.end < pb.range.start:
            raise CorruptFileError(what, f"range {pb.range.start}..{pb.range.end} is reversed")
        return np.arange(pb.range.start, pb.range.end, dtype=np.uint64)
    if kind == "range_with_holes":
        seg = pb.range_with_holes
        full = np.arange(seg.start, seg.end, dtype=np.uint64)
        return full[~np.isin(full, _decode_array(seg.holes, what))]
    if kind == "range_with_bitmap":
        seg = pb.range_with_bitmap
        span = seg.end - seg.start
        bits = np.unpackbits(np.frombuffer(seg.bitmap, dtype=np.uint8), bitorder="little")
        if bits.size < span:
            raise CorruptFileError(what, f"bitmap of {bits.size} bits for a range of {span}")
        return np.flatnonzero(bits[:span]).astype(np.uint64) + np.uint64(seg.start)
    if kind == "sorted_array":
        return _decode_array(pb.sorted_array, what)
    if kind == "array":
        return _decode_array(pb.array, what)
    raise CorruptFileError(what, f"unknown row id segment kind {kind!r}")


def _encode_sorted_run(values: np.ndarray, pb: rowids_pb2.U64Segment) -> None:
    """Encode strictly increasing ``values`` as the smallest sorted segment (Lance's estimates)."""
    start, end = int(values[0]), int(values[-1]) + 1
    span = end - start
    holes = span - values.size
    if holes == 0:
        pb.range.start, pb.range.end = start, end
        return
    costs = {
        "holes": _SEGMENT_OVERHEAD + 4 * holes,
        "bitmap": _SEGMENT_OVERHEAD + (span + 7) // 8,
        "sorted": _SEGMENT_OVERHEAD + 2 * values.size,
    }
    best = min(costs, key=costs.__getitem__)
    if best == "holes":
        present = np.zeros(span, dtype=bool)
        present[(values - np.uint64(start)).astype(np.int64)] = True
        missing = np.flatnonzero(~present).astype(np.uint64) + np.uint64(start)
        pb.range_with_holes.start, pb.range_with_holes.end = start, end
        pb.range_with_holes.holes.CopyFrom(_encode_array(missing))
    elif best == "bitmap":
        present = np.zeros(span, dtype=bool)
        present[(values - np.uint64(start)).astype(np.int64)] = True
        pb.range_with_bitmap.start, pb.range_with_bitmap.end = start, end
        pb.range_with_bitmap.bitmap = np.packbits(present, bitorder="little").tobytes()
    else:
        pb.sorted_array.CopyFrom(_encode_array(values))


def encode_segments(values: np.ndarray) -> list[rowids_pb2.U64Segment]:
    """Segments holding ``values`` in order: one per increasing run, or one Array if unsorted."""
    values = np.asarray(values, dtype=np.uint64)
    if not values.size:
        return []
    breaks = np.flatnonzero(values[1:] <= values[:-1]) + 1
    if breaks.size * _SEGMENT_OVERHEAD > values.size * 2:  # mostly unsorted: one array is smaller
        segment = rowids_pb2.U64Segment()
        segment.array.CopyFrom(_encode_array(values))
        return [segment]
    segments = []
    for run in np.split(values, breaks):
        segment = rowids_pb2.U64Segment()
        _encode_sorted_run(run, segment)
        segments.append(segment)
    return segments


# -- sequences ---------------------------------------------------------------------------------


def decode_row_ids(data: bytes, what: str = "row id sequence") -> np.ndarray:
    """Row id of each physical row, from serialized ``RowIdSequence`` bytes."""
    sequence = rowids_pb2.RowIdSequence()
    try:
        sequence.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(what, f"row id sequence does not decode: {exc}") from exc
    parts = [decode_segment(segment, what) for segment in sequence.segments]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def encode_row_ids(row_ids: np.ndarray) -> bytes:
    """Serialized ``RowIdSequence`` of ``row_ids`` (in row order)."""
    return rowids_pb2.RowIdSequence(segments=encode_segments(row_ids)).SerializeToString()


def decode_versions(data: bytes, physical_rows: int, what: str = "row version sequence") -> np.ndarray:
    """Version of each physical row from serialized ``RowDatasetVersionSequence`` bytes."""
    sequence = rowids_pb2.RowDatasetVersionSequence()
    try:
        sequence.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(what, f"row version sequence does not decode: {exc}") from exc
    # runs cover consecutive rows: a run's span gives its length only (Lance's RowDatasetVersionRun;
    # compaction keeps each source fragment's spans, e.g. bitmaps of its live rows)
    # (a sequence carried for a fragment's first rows only leaves the others 0)
    lengths = [decode_segment(run.span, what).size for run in sequence.runs]
    if sum(lengths) > physical_rows:
        raise CorruptFileError(what, f"version runs cover {sum(lengths)} rows, the fragment has {physical_rows}")
    versions = np.zeros(physical_rows, dtype=np.uint64)
    versions[:sum(lengths)] = np.repeat(np.array([run.version for run in sequence.runs], dtype=np.uint64),
                                        np.array(lengths, dtype=np.int64))
    return versions


def encode_versions(versions: np.ndarray) -> bytes:
    """Serialized ``RowDatasetVersionSequence``: one Range run per stretch of equal versions."""
    versions = np.asarray(versions, dtype=np.uint64)
    sequence = rowids_pb2.RowDatasetVersionSequence()
    if versions.size:
        starts = np.concatenate(([0], np.flatnonzero(versions[1:] != versions[:-1]) + 1))
        ends = np.concatenate((starts[1:], [versions.size]))
        for start, end in zip(starts.tolist(), ends.tolist()):
            run = sequence.runs.add(version=int(versions[start]))
            run.span.range.start, run.span.range.end = start, end
    return sequence.SerializeToString()


# -- fragments ---------------------------------------------------------------------------------

#: (inline field, external field) of each per-row sequence a fragment may carry.
ROW_ID_FIELDS = ("inline_row_ids", "external_row_ids")
CREATED_AT_FIELDS = ("created_at_version_inline", "created_at_version_file")
LAST_UPDATED_FIELDS = ("last_updated_at_version_inline", "last_updated_at_version_file")


def sequence_bytes(store: ObjectStore, fragment: table_pb2.DataFragment, fields: tuple[str, str]) -> bytes | None:
    """The serialized sequence stored inline or in an external file, or None if absent."""
    inline, external = fields
    if fragment.HasField(inline):
        return getattr(fragment, inline)
    if fragment.HasField(external):
        ref = getattr(fragment, external)
        data = store.read_range(ref.path, ref.offset, ref.size)
        if len(data) != ref.size:
            raise CorruptFileError(ref.path, f"expected {ref.size} bytes at {ref.offset}, got {len(data)}")
        return data
    return None


def stamp_new_fragment(pb: table_pb2.DataFragment, version: int, next_row_id: int) -> int:
    """Complete, at commit, a new fragment of an ``Update`` on a dataset with stable row ids.

    The fragment may carry the row ids (and created-at versions) of its first rows: rows moved
    by an update keep their ids. The remaining rows (inserted ones) get fresh ids from
    ``next_row_id``; every row gets ``version`` as its last-updated version and the fresh rows
    as their created-at version, as Lance derives them at commit. Returns the next free row id.
    """
    rows = pb.physical_rows
    carried = decode_row_ids(pb.inline_row_ids) if pb.HasField("inline_row_ids") else np.empty(0, np.uint64)
    if pb.HasField("external_row_ids") or carried.size > rows:
        raise CorruptFileError(f"fragment {pb.id}", f"carries {carried.size} row ids for {rows} rows")
    kept = carried.size
    fresh = np.arange(next_row_id, next_row_id + rows - kept, dtype=np.uint64)
    pb.inline_row_ids = encode_row_ids(np.concatenate((carried, fresh)))
    created = np.full(rows, version, dtype=np.uint64)
    if kept and pb.HasField("created_at_version_inline"):
        created[:kept] = decode_versions(pb.created_at_version_inline, rows)[:kept]
    pb.created_at_version_inline = encode_versions(created)
    pb.last_updated_at_version_inline = encode_versions(np.full(rows, version, dtype=np.uint64))
    return next_row_id + int(fresh.size)


def created_versions(store: ObjectStore, fragment: table_pb2.DataFragment) -> np.ndarray:
    """Created-at version of each physical row (1 where the fragment records none)."""
    data = sequence_bytes(store, fragment, CREATED_AT_FIELDS)
    if data is None:
        return np.ones(fragment.physical_rows, dtype=np.uint64)
    return decode_versions(data, fragment.physical_rows, f"fragment {fragment.id} created-at versions")
