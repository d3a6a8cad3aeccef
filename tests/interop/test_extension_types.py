"""Arrow extension types, as pylance 14 stores them: the storage type, and the extension's name and
metadata in the field's ``ARROW:extension:*`` metadata. Before, a column of one could be neither
read nor written here (the other columns of such a dataset could). pylance 14 is the oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest
from lance.arrow import bfloat16_array

import airflow_lance.core as ours
from airflow_lance.core.schema import storage_schema

ROWS = 300


def _uuids(ids: np.ndarray) -> pa.Array:
    return pa.array([None if i % 7 == 3 else int(i).to_bytes(16, "little") for i in ids], pa.binary(16)).cast(
        pa.uuid())


def _table(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "uuid": _uuids(ids),
        "tensor": pa.FixedShapeTensorArray.from_numpy_ndarray(
            (ids[:, None] * 6 + np.arange(6)).astype(np.float32).reshape(rows, 2, 3)),
        "flag": pa.ExtensionArray.from_storage(pa.bool8(), pa.array([None if i % 5 == 1 else i % 2 for i in ids],
                                                                    pa.int8())),
        "half": bfloat16_array([None if i % 4 == 0 else float(i % 64) for i in ids]),  # pylance's own type
        "nested": pa.StructArray.from_arrays([_uuids(ids + 1)], ["u"]),
        "listed": pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), _uuids(ids + 2)),
    })


def _plain(table: pa.Table) -> list[dict]:
    """Rows of the storage values (pyarrow cannot list a tensor extension column's values)."""
    return table.cast(storage_schema(table.schema)).to_pylist()


def _fields(uri: str) -> list[tuple]:
    return [(f.name, f.logical_type, dict(f.metadata)) for f in ours.dataset(uri).manifest_file.manifest.fields]


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_we_read_and_write_extension_types_as_pylance(tmp_path, version):
    table = _table(0, ROWS)
    if version == "2.0":  # 2.0 structs hold no nulls
        table = table.set_column(5, "nested", pa.StructArray.from_arrays([table["nested"].combine_chunks().field(0)],
                                                                         ["u"]))
    theirs, mine = str(tmp_path / "theirs"), str(tmp_path / "ours")
    pylance.write_dataset(table, theirs, data_storage_version=version, max_rows_per_file=100)
    ours.write_dataset(table, mine, data_storage_version=version, max_rows_per_file=100)
    assert pylance.dataset(theirs).to_table().equals(table)
    assert ours.dataset(theirs).to_table().equals(table)
    taken = np.array([0, 3, 99, 100, 299])
    assert ours.dataset(theirs).take(taken).equals(table.take(taken))
    assert ours.dataset(theirs).to_table(filter="id >= 150").equals(table.slice(150))
    assert pylance.dataset(mine).to_table().equals(table)
    assert _fields(mine) == _fields(theirs)
    assert ours.dataset(mine).schema == pylance.dataset(mine).schema


def test_we_modify_pylances_dataset_with_extension_types(tmp_path):
    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, ROWS), uri, max_rows_per_file=100)
    ours.write_dataset(_table(ROWS, 50), uri, mode="append")
    ours.dataset(uri).delete("id % 11 = 0")
    ours.dataset(uri).update({"id": "id + 10000"}, where="id = 1")
    changed = _table(340, 20)
    ours.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(changed)
    assert ours.dataset(uri).optimize.compact_files().fragments_removed > 1
    rows = {row["id"]: row for row in _plain(_table(0, ROWS + 50)) if row["id"] % 11}
    rows[10001] = {**rows.pop(1), "id": 10001}
    rows.update((row["id"], row) for row in _plain(changed))
    got = pylance.dataset(uri).to_table().sort_by("id")
    assert got.schema == _table(0, 1).schema
    assert _plain(got) == [rows[key] for key in sorted(rows)]
    assert ours.dataset(uri).to_table().sort_by("id").equals(got)


def test_an_extension_type_pyarrow_does_not_know_reads_as_its_storage(tmp_path):
    """In a process that has not imported pylance (which registers ``lance.bfloat16``), the column
    reads as its storage type with the extension's metadata, as Arrow IPC reads it, and an append of
    such values keeps pylance reading the extension type."""
    uri = str(tmp_path / "half")
    table = _table(0, 10).select(["id", "half"])
    pylance.write_dataset(table, uri)
    script = (
        "import json, sys, pyarrow as pa, airflow_lance.core as ours\n"
        "ds = ours.dataset(sys.argv[1]); t = ds.to_table(); f = t.schema.field('half')\n"
        "assert 'lance' not in sys.modules\n"
        "ours.write_dataset(t.slice(0, 2), sys.argv[1], mode='append')\n"
        "print(json.dumps([str(f.type), {k.decode(): v.decode() for k, v in f.metadata.items()}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, uri], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    dtype, metadata = json.loads(out.stdout)
    assert dtype == "fixed_size_binary[2]" and metadata["ARROW:extension:name"] == "lance.bfloat16"
    read = pylance.dataset(uri).to_table()
    assert read.schema.field("half").type == table.schema.field("half").type
    assert read.equals(pa.concat_tables([table, table.slice(0, 2)]))


def test_legacy_files_refuse_extension_types(tmp_path):
    """As pylance's legacy writer does."""
    with pytest.raises(ours.UnsupportedFeatureError, match="uuid"):
        ours.write_dataset(_table(0, 5).select(["id", "uuid"]), str(tmp_path / "legacy"), data_storage_version="legacy")
