"""Shared helpers of the Kartothek import tests: the committed fixtures made by kartothek 5.3.

``tests/fixtures/kartothek/store`` is one Kartothek storage location holding
several datasets (see ``generate_fixtures.py`` there); ``expected/`` holds, per
dataset and table, the rows the generator wrote (``*.input.parquet``) and
kartothek's own read of them (``*.kartothek.parquet``).
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "kartothek"
STORE = FIXTURES / "store"
EXPECTED = FIXTURES / "expected"

#: (dataset uuid, table) of every importable fixture table.
TABLES = [
    ("one_key", "table"),
    ("two_keys", "table"),
    ("multi_table", "core"),
    ("multi_table", "helper"),
    ("updated", "table"),
    ("empty_partition", "table"),
    ("header_only", "table"),
    ("v3", "table"),
]


def copy_datasets(target: pathlib.Path, *uuids: str) -> pathlib.Path:
    """A writable copy of some fixture datasets (a new storage location)."""
    target.mkdir(parents=True, exist_ok=True)
    for uuid in uuids:
        for path in STORE.iterdir():
            if path.name == uuid:
                shutil.copytree(path, target / uuid)
            elif path.name.startswith(uuid + ".by-dataset-metadata."):
                shutil.copy(path, target / path.name)
    return target


def load_json_metadata(store: pathlib.Path, uuid: str) -> dict:
    return json.loads((store / f"{uuid}.by-dataset-metadata.json").read_text())


def save_json_metadata(store: pathlib.Path, uuid: str, document: dict) -> None:
    (store / f"{uuid}.by-dataset-metadata.json").write_text(json.dumps(document))


def ground_truth(uuid: str, table: str) -> pa.Table | None:
    """The rows the generator handed to kartothek (None for a dataset without rows)."""
    path = EXPECTED / f"{uuid}.{table}.input.parquet"
    return pq.read_table(path) if path.exists() else None


def kartothek_read(uuid: str, table: str) -> pa.Table:
    """The rows as kartothek 5.3's ``read_table`` returned them."""
    return pq.read_table(EXPECTED / f"{uuid}.{table}.kartothek.parquet")


def common_metadata_schema(store: pathlib.Path, uuid: str, table: str) -> pa.Schema:
    schema = pq.read_schema(store / uuid / table / "_common_metadata")
    return pa.schema([f for f in schema if not f.name.startswith("__index_level_")])


def read_with_pyarrow(store: pathlib.Path, uuid: str, table: str, partition_keys: list[str]) -> pa.Table:
    """The table read with plain pyarrow: the payload files the metadata lists, the
    partition columns restored by pyarrow's Hive partitioning (URL-decoded, typed by
    ``_common_metadata``), every column cast to the ``_common_metadata`` type."""
    schema = common_metadata_schema(store, uuid, table)
    metadata = json.loads((store / f"{uuid}.by-dataset-metadata.json").read_text()) if (
        store / f"{uuid}.by-dataset-metadata.json").exists() else None
    if metadata is None:
        import msgpack
        import zstandard

        raw = (store / f"{uuid}.by-dataset-metadata.msgpack.zstd").read_bytes()
        metadata = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(raw))
    files = [str(store / part["files"][table]) for part in metadata.get("partitions", {}).values()]
    partitioning = pads.HivePartitioning(
        pa.schema([schema.field(key) for key in partition_keys]), segment_encoding="uri"
    )
    payload_schema = pa.schema([f for f in schema if f.name not in partition_keys])
    tables = []
    for path in files:
        data = pq.read_table(path)
        data = data.select(payload_schema.names).cast(payload_schema)
        values = pads.get_partition_keys(partitioning.parse(path[len(str(store / uuid / table)):]))
        for position, key in enumerate(partition_keys):
            field = schema.field(key)
            data = data.add_column(position, field, pa.repeat(pa.scalar(values[key], field.type), data.num_rows))
        tables.append(data.select(schema.names))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def as_expected(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` in the column order and types of ``schema``, sorted by ``id``, no metadata."""
    schema = schema.remove_metadata()
    return data.select(schema.names).cast(schema).sort_by("id").replace_schema_metadata(None)
