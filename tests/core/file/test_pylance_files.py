"""Data files written by pylance (2.0) read by our reader equal pylance's own reading."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2

from airflow_lance.core._proto import encodings_v2_0_pb2
from airflow_lance.core.file import LanceFileReader

lance = pytest.importorskip("lance")

STRUCT = pa.struct([("a", pa.int32()), ("b", pa.string())])


def _mixed_table(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    mask = rng.random(n) < 0.2
    return pa.table({
        "i64": pa.array(np.arange(n), mask=mask),
        "u8": pa.array(rng.integers(0, 255, n).astype(np.uint8)),
        "f16": pa.array(rng.random(n).astype(np.float16)),
        "f32": pa.array(rng.random(n).astype(np.float32), mask=mask),
        "b": pa.array(rng.random(n) < 0.5, mask=mask),
        "s": pa.array([f"string {i} ü" for i in range(n)], mask=mask),
        "ls": pa.array([f"L{i}" for i in range(n)], pa.large_string()),
        "bin": pa.array([bytes([i % 256]) * (i % 5) for i in range(n)], pa.binary(), mask=mask),
        "fsb": pa.array([bytes([i % 256]) * 4 for i in range(n)], pa.binary(4)),
        "ts": pa.array(np.arange(n), pa.timestamp("us", "UTC")),
        "d32": pa.array(np.arange(n, dtype=np.int32), pa.date32()),
        "dec": pa.array(np.arange(n), pa.int64()).cast(pa.decimal128(24, 2)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8).astype(np.float32)), 8),
        "lst": pa.array([[i] * (i % 3) if i % 7 else None for i in range(n)], pa.list_(pa.int32())),
        "llst": pa.array([[str(i)] if i % 5 else [] for i in range(n)], pa.large_list(pa.string())),
        "lst_struct": pa.array([[{"a": i, "b": str(i)}] * (i % 2) for i in range(n)], pa.list_(STRUCT)),
        "st": pa.array([{"a": i if i % 3 else None, "b": "x" * (i % 4)} for i in range(n)], STRUCT),
        "nested": pa.array([{"inner": {"a": i, "b": None}, "arr": [i % 100, None]} for i in range(n)],
                           pa.struct([("inner", STRUCT), ("arr", pa.list_(pa.int8()))])),
        "dict": pa.array([("x", "y", None)[i % 3] for i in range(n)]).dictionary_encode(),
        "nul": pa.nulls(n),
        "allnull_i": pa.nulls(n, pa.int32()),
    })


def _read(path, **kwargs) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return LanceFileReader(source, path=str(path)).read(**kwargs)


def _decode_dictionaries(table: pa.Table) -> pa.Table:
    """pylance keeps its null dictionary item; compare dictionary columns by value."""
    columns = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.table(columns, names=table.column_names)


def _page_kinds(path, column: int) -> set[str]:
    with pa.memory_map(str(path)) as source:
        reader = LanceFileReader(source, path=str(path))
        kinds = set()
        for page in reader.column_metadata(column).pages:
            packed = any_pb2.Any()
            packed.ParseFromString(page.encoding.direct.encoding)
            encoding = encodings_v2_0_pb2.ArrayEncoding()
            encoding.ParseFromString(packed.value)
            kinds.add(encoding.WhichOneof("array_encoding"))
        return kinds


def test_mixed_types(pylance_file):
    table = _mixed_table(500)
    dataset_path, data_path, data_file, schema = pylance_file(table)
    expected = lance.dataset(str(dataset_path)).to_table()
    mapping = dict(zip(data_file.fields, data_file.column_indices))
    ours = _read(data_path, schema=schema, column_index=mapping)
    assert _decode_dictionaries(ours).equals(_decode_dictionaries(expected))
    assert ours.equals(table)  # our dictionary reading also drops pylance's null item again
    assert ours.schema.equals(expected.schema, check_metadata=True)


def test_projection(pylance_file):
    table = _mixed_table(300)
    dataset_path, data_path, data_file, schema = pylance_file(table)
    mapping = dict(zip(data_file.fields, data_file.column_indices))
    columns = ["nested", "s", "lst"]
    ours = _read(data_path, schema=schema.project(columns), column_index=mapping)
    assert ours.equals(lance.dataset(str(dataset_path)).to_table(columns=columns))


def test_auto_dictionary_strings(pylance_file):
    n = 5000
    table = pa.table({
        "cat": pa.array([("red", "green", None, "blue")[i % 4] for i in range(n)]),
        "low": pa.array([str(i % 50) for i in range(n)]),
    })
    dataset_path, data_path, _, _ = pylance_file(table, max_page_bytes=8192)
    assert _page_kinds(data_path, 0) == {"dictionary"}
    assert _page_kinds(data_path, 1) == {"dictionary"}
    with pa.memory_map(str(data_path)) as source:
        assert len(LanceFileReader(source, path=str(data_path)).column_metadata(0).pages) > 1
    ours = _read(data_path)
    assert ours.equals(lance.dataset(str(dataset_path)).to_table())
    assert ours.equals(table)


def test_multi_page_columns(pylance_file):
    table = _mixed_table(5000)
    dataset_path, data_path, _, _ = pylance_file(table, max_page_bytes=4096)
    with pa.memory_map(str(data_path)) as source:
        reader = LanceFileReader(source, path=str(data_path))
        assert len(reader.column_metadata(0).pages) > 5
    ours = _read(data_path)
    expected = lance.dataset(str(dataset_path)).to_table()
    assert _decode_dictionaries(ours).equals(_decode_dictionaries(expected))


@pytest.mark.parametrize("scheme", ["zstd", "lz4", "none"])
def test_compressed_columns(scheme, pylance_file):
    n = 2000
    meta = {"lance-encoding:compression": scheme}
    schema = pa.schema([
        pa.field("s", pa.string(), metadata=meta),
        pa.field("b", pa.large_binary(), metadata=meta),
        pa.field("i", pa.int64(), metadata=meta),
        pa.field("l", pa.list_(pa.string()), metadata=meta),
    ])
    table = pa.table({
        "s": [f"compressible value number {i}" if i % 9 else None for i in range(n)],
        "b": [b"abc" * (i % 7) for i in range(n)],
        "i": list(range(n)),
        "l": [[f"item {i}"] * (i % 3) for i in range(n)],
    }, schema=schema)
    dataset_path, data_path, _, _ = pylance_file(table, max_page_bytes=16 * 1024)
    ours = _read(data_path)
    assert ours.equals(lance.dataset(str(dataset_path)).to_table())
    assert ours.equals(table)


def test_empty_item_pages_and_all_null_lists(pylance_file):
    table = pa.table({
        "l": pa.array([None, None, []], pa.list_(pa.int8())),
        "s": pa.array([None, None, None], pa.string()),
        "ls": pa.array([[], [], []], pa.list_(STRUCT)),
    })
    dataset_path, data_path, _, _ = pylance_file(table)
    ours = _read(data_path)
    assert ours.equals(lance.dataset(str(dataset_path)).to_table())
    assert ours.equals(table)
