"""The inserted-keys filter of a merge_insert on the unenforced primary key (pylance 14's
``Update.inserted_rows``): a split block bloom filter (Parquet's SBBF, 1024 blocks of
8 x 32 bits, 32 KiB) over XxHash64 (seed 0) of each inserted key's bytes.

Key bytes as Lance's: int32/int64 as little-endian int64, uint32/uint64 as little-endian
uint64, strings as UTF-8, binaries as they are; a composite key is each part followed by a
zero byte. Rows with a null key part are left out; keys of other types add nothing (Lance's
``extract_key_value_from_batch``). Two filters "intersect" when any bitmap byte shares a bit
(Lance's ``bytes_might_intersect``): concurrent merge_inserts that may have inserted the same
key conflict, the later one is re-planned and finds the key.

Everything is vectorised: XxHash64 over rows of any length runs stripe by stripe over a
padded byte matrix with per-row masks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from airflow_lance.core._proto import transaction_pb2

NUMBER_OF_ITEMS = 8192
PROBABILITY = 0.00057
NUM_BLOCKS = 1024  # what pylance 14 writes for (8192, 0.00057): 32768 bytes
_SALT = np.array([0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31],
                 dtype=np.uint32)

_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P3 = np.uint64(1609587929392839161)
_P4 = np.uint64(9650029242287828579)
_P5 = np.uint64(2870177450012600261)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def _merge_round(acc: np.ndarray, val: np.ndarray) -> np.ndarray:
    return (acc ^ _round(np.zeros_like(val), val)) * _P1 + _P4


def _read(matrix: np.ndarray, rows: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """Little-endian ``width``-byte words at ``starts`` of ``rows``."""
    cols = starts[:, None] + np.arange(width)
    raw = matrix[rows[:, None], cols].astype(np.uint64)
    return (raw << (np.arange(width, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64)


def xxhash64(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """XxHash64 (seed 0) of each value ``data[offsets[i]:offsets[i+1]]``."""
    lengths = np.diff(offsets).astype(np.int64)
    n = lengths.size
    if n == 0:
        return np.zeros(0, np.uint64)
    width = int(lengths.max()) + 8
    matrix = np.zeros((n, width), np.uint8)
    rows_of_byte = np.repeat(np.arange(n), lengths)
    col_of_byte = np.arange(int(lengths.sum())) - np.repeat(offsets[:-1] - offsets[0], lengths)
    matrix[rows_of_byte, col_of_byte] = data[offsets[0]:offsets[-1]]
    all_rows = np.arange(n)
    with np.errstate(over="ignore"):
        h = np.full(n, _P5, np.uint64)
        stripes = lengths // 32
        long = stripes > 0
        if long.any():
            idx = all_rows[long]
            v = [np.full(idx.size, _P1 + _P2, np.uint64), np.full(idx.size, _P2, np.uint64),
                 np.zeros(idx.size, np.uint64), np.full(idx.size, np.uint64(0) - _P1, np.uint64)]
            for s in range(int(stripes.max())):
                live = stripes[idx] > s
                rows = idx[live]
                for lane in range(4):
                    word = _read(matrix, rows, np.full(rows.size, s * 32 + lane * 8), 8)
                    v[lane][live] = _round(v[lane][live], word)
            acc = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for lane in range(4):
                acc = _merge_round(acc, v[lane])
            h[long] = acc
        h += lengths.astype(np.uint64)
        pos = stripes * 32
        for _ in range(3):
            live = lengths - pos >= 8
            if not live.any():
                break
            rows = all_rows[live]
            k = _round(np.zeros(rows.size, np.uint64), _read(matrix, rows, pos[live], 8))
            h[live] = _rotl(h[live] ^ k, 27) * _P1 + _P4
            pos[live] += 8
        live = lengths - pos >= 4
        if live.any():
            rows = all_rows[live]
            h[live] = _rotl(h[live] ^ (_read(matrix, rows, pos[live], 4) * _P1), 23) * _P2 + _P3
            pos[live] += 4
        for _ in range(3):
            live = lengths - pos >= 1
            if not live.any():
                break
            rows = all_rows[live]
            byte = matrix[rows, pos[live]].astype(np.uint64)
            h[live] = _rotl(h[live] ^ (byte * _P5), 11) * _P1
            pos[live] += 1
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def _key_part(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(bytes, offsets, valid) of one key column in Lance's byte form; None for other types."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = array.type
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_int32(t) or pa.types.is_int64(t) or pa.types.is_uint32(t) or pa.types.is_uint64(t):
        target = np.dtype("<i8") if pa.types.is_signed_integer(t) else np.dtype("<u8")
        values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False)).astype(target)
        data = values.view(np.uint8)
        return data, np.arange(values.size + 1, dtype=np.int64) * 8, valid
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        as_binary = array.cast(pa.large_binary()).fill_null(b"")
        _, offsets_buf, data_buf = as_binary.buffers()
        offsets = np.frombuffer(offsets_buf, np.int64)[as_binary.offset:as_binary.offset + len(as_binary) + 1]
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        return data, offsets.astype(np.int64), valid
    return None


def key_hashes(table: pa.Table, on: Sequence[str]) -> np.ndarray:
    """XxHash64 of the keys of ``table``'s rows as Lance computes them (rows with a null or
    unsupported key part left out)."""
    parts = [_key_part(table.column(name)) for name in on]
    if any(p is None for p in parts) or table.num_rows == 0:
        return np.zeros(0, np.uint64)
    valid = np.logical_and.reduce([p[2] for p in parts])
    if len(parts) == 1:
        data, offsets, _ = parts[0]
    else:  # each part followed by a zero byte, concatenated per row
        lengths = np.stack([np.diff(p[1]) + 1 for p in parts], axis=1)
        offsets = np.concatenate(([0], np.cumsum(lengths.sum(axis=1))))
        data = np.zeros(int(offsets[-1]), np.uint8)
        start = offsets[:-1].copy()
        for i, (pdata, poffs, _) in enumerate(parts):
            plen = np.diff(poffs)
            dest = np.repeat(start, plen) + (np.arange(int(plen.sum())) - np.repeat(poffs[:-1] - poffs[0], plen))
            data[dest] = pdata[poffs[0]:poffs[-1]]
            start += lengths[:, i]
    hashes = xxhash64(data, offsets)
    return hashes[valid]


@dataclasses.dataclass
class KeyExistenceFilter:
    """pylance's ``KeyExistenceFilter``: the key field ids and a bloom bitmap (or, as read from
    other writers, a set of key hashes)."""

    field_ids: list[int]
    bitmap: bytes | None = None
    number_of_items: int = NUMBER_OF_ITEMS
    probability: float = PROBABILITY
    exact_hashes: frozenset[int] | None = None

    @classmethod
    def build(cls, field_ids: Sequence[int], hashes: np.ndarray) -> KeyExistenceFilter:
        blocks = np.zeros((NUM_BLOCKS, 8), np.uint32)
        if hashes.size:
            with np.errstate(over="ignore"):
                block = (((hashes >> np.uint64(32)) * np.uint64(NUM_BLOCKS)) >> np.uint64(32)).astype(np.int64)
                low = hashes.astype(np.uint32)
                shifts = (low[:, None] * _SALT[None, :]) >> np.uint32(27)
            bits = np.left_shift(np.uint32(1), shifts).astype(np.uint32)
            for word in range(8):
                np.bitwise_or.at(blocks[:, word], block, bits[:, word])
        return cls(list(field_ids), blocks.astype("<u4").tobytes())

    def intersects(self, other: KeyExistenceFilter) -> bool:
        """Lance's rule: True when the two may share a key (different configurations: True)."""
        if self.bitmap is not None and other.bitmap is not None:
            if (self.number_of_items != other.number_of_items or abs(self.probability - other.probability) > 1e-15
                    or len(self.bitmap) != len(other.bitmap)):
                return True
            a = np.frombuffer(self.bitmap, np.uint8)
            b = np.frombuffer(other.bitmap, np.uint8)
            return bool(np.any(a & b))
        if self.exact_hashes is not None and other.exact_hashes is not None:
            return bool(self.exact_hashes & other.exact_hashes)
        return True

    def to_pb(self) -> transaction_pb2.Transaction.KeyExistenceFilter:
        pb = transaction_pb2.Transaction.KeyExistenceFilter(field_ids=self.field_ids)
        if self.bitmap is not None:
            pb.bloom.bitmap = self.bitmap
            pb.bloom.num_bits = len(self.bitmap) * 8
            pb.bloom.number_of_items = self.number_of_items
            pb.bloom.probability = self.probability
        else:
            pb.exact.key_hashes.extend(sorted(self.exact_hashes or ()))
        return pb

    @classmethod
    def from_pb(cls, pb: transaction_pb2.Transaction.KeyExistenceFilter) -> KeyExistenceFilter:
        kind = pb.WhichOneof("data")
        if kind == "bloom":
            return cls(list(pb.field_ids), bytes(pb.bloom.bitmap), pb.bloom.number_of_items or NUMBER_OF_ITEMS,
                       pb.bloom.probability or PROBABILITY)
        hashes = frozenset(pb.exact.key_hashes) if kind == "exact" else frozenset()
        return cls(list(pb.field_ids), None, exact_hashes=hashes)


_PRIMARY_KEY = "lance-schema:unenforced-primary-key"


def primary_key_fields(schema) -> list:
    """The unenforced primary key's top-level fields of a ``LanceSchema``, in key order as
    pylance 14 orders them: fields with a ``...:position`` above 0 by position, then the
    other key fields (``"true"``, or position 0) in schema order."""
    keyed = []
    for order, field in enumerate(schema.top_level()):
        meta = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in field.metadata.items()}
        position = meta.get(_PRIMARY_KEY + ":position")
        if meta.get(_PRIMARY_KEY, "").lower() in ("true", "1") or (position and position.isdigit()):
            rank = int(position) if position and position.isdigit() and int(position) > 0 else 1 << 30
            keyed.append((rank, order, field))
    return [f for _, _, f in sorted(keyed, key=lambda x: (x[0], x[1]))]
