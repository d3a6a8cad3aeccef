"""JSON columns (``arrow.json``), which pylance 14 stores as JSONB (logical type ``json``,
``lance.json``; ``core/jsonb.py``). Before, reading such a column and writing JSON were refused.
pylance 14 is the oracle: the same bytes for the same text, the same canonical text back."""

from __future__ import annotations

import json
import os

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core import jsonb
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.schema import LanceSchema

# numbers of every width and sign, beyond 64 bits, doubles in every notation, escapes, non-ASCII,
# keys out of order (stored sorted), empty containers, deep nesting
TEXTS = ['{"b": 2, "a": [1, 2.5, null, "x"]}', None, '"é\\u0001\\"/\\n"', "0", "12", "-3", "-128", "-129", "256",
         "65536", "4294967296", "18446744073709551615", "-9223372036854775808", "123456789012345678901", "1.0",
         "-0.0", "1e21", "1e-7", "2.5E+3", "0.1", "true", "false", "null", "{}", "[]",
         '{"aa": 1, "b": 2, "B": 3, "ab": 4}', '{"nested": {"z": 1, "y": [{"k": "v"}, []]}}',
         "1e-5", "-7.585928232854437e-5", "1.234e-6", "1e-4", "1e15", "1e16"]


def _json(texts: list[str | None]) -> pa.Array:
    return pa.array(texts, pa.json_())


def _table(start: int, texts: list[str | None]) -> pa.Table:
    n = len(texts)
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "doc": _json(texts),
        "meta": pa.StructArray.from_arrays([_json(texts[::-1]), pa.array(range(n))], names=["doc", "n"]),
        "docs": pa.ListArray.from_arrays(pa.array([0] + [min(i, 3) for i in range(1, n + 1)], pa.int32()),
                                         _json(['{"q": 1}', "[1, 2]", "null"])),
    })


def _stored(uri: str) -> list[bytes | None]:
    """The raw values of the ``doc`` column (JSONB bytes) of a dataset's first file."""
    ds = ours.dataset(uri)
    data_file = ds.get_fragments()[0].metadata.files[0]
    path = os.path.join(uri, "data", data_file.path)
    fields = [f for f in ds.lance_schema.fields if f.name in ("id", "doc") and f.parent_id == -1]
    raw = LanceSchema.from_fields([type(f)(name=f.name, id=f.id, parent_id=-1, nullable=True,
                                           logical_type="large_binary" if f.name == "doc" else f.logical_type)
                                   for f in fields], {})
    return LanceFileReader(pa.OSFile(path), path=path).read(
        raw, column_index=dict(zip(data_file.fields, data_file.column_indices))).column("doc").to_pylist()


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_we_read_and_write_json_as_pylance(tmp_path, version):
    table = _table(0, TEXTS)
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    ours.write_dataset(table, mine, data_storage_version=version, max_rows_per_file=10)
    pylance.write_dataset(table, theirs, data_storage_version=version, max_rows_per_file=10)
    expected = pylance.dataset(theirs).to_table()
    assert pylance.dataset(mine).to_table().equals(expected)  # pylance reads ours as its own
    assert ours.dataset(theirs).to_table().equals(expected)  # we read pylance's as it does
    assert ours.dataset(mine).to_table().equals(expected)
    assert ours.dataset(mine).schema == pylance.dataset(theirs).schema
    assert [(f.name, f.logical_type, dict(f.metadata), f.encoding) for f in ours.dataset(mine).lance_schema.fields] \
        == [(f.name, f.logical_type, dict(f.metadata), f.encoding) for f in ours.dataset(theirs).lance_schema.fields]
    assert _stored(mine) == _stored(theirs)  # the same JSONB bytes
    canonical = expected.column("doc").to_pylist()
    assert canonical[0] == '{"a":[1,2.5,null,"x"],"b":2}' and canonical[17] == "1e-7"
    assert ours.dataset(mine).take([0, 13, 26]).equals(expected.take([0, 13, 26]))


def test_doubles_of_every_magnitude_read_as_pylance_writes_them(tmp_path, loops):
    """pylance's notation of a double: shortest digits, exponent notation below 1e-5 and from 1e16 on
    (until December 2026 we wrote 1e-5 <= |x| < 1e-4 with an exponent, as Python does)."""
    rng = np.random.default_rng(7)
    exponents = np.arange(-320, 308)
    values = rng.uniform(1, 9.9, len(exponents)) * 10.0 ** exponents.astype(float)
    values = np.concatenate([values, -values[::7], 10.0 ** np.arange(-8, 18).astype(float), [0.1, 0.5, 100.0, 5e-324]])
    values = values[np.isfinite(values)]
    texts = [json.dumps(v) for v in values.tolist()] + [json.dumps(values[i: i + 5].tolist()) for i in range(0, 600, 5)]
    uri = str(tmp_path / "d")
    pylance.write_dataset(pa.table({"doc": _json(texts)}), uri)
    assert ours.dataset(uri).to_table().equals(pylance.dataset(uri).to_table())


def test_json_in_maps_as_pylance(tmp_path):
    items = _json(['{"x": 1}', None, "[2]"])
    maps = pa.MapArray.from_arrays(pa.array([0, 2, 2, 3], pa.int32()), pa.array(["a", "b", "c"]), items,
                                   mask=pa.array([False, False, True]))
    table = pa.table({"id": [1, 2, 3], "m": maps})
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    ours.write_dataset(table, mine)
    pylance.write_dataset(table, theirs)
    expected = pylance.dataset(theirs).to_table()
    assert expected.column("m").to_pylist() == [[("a", '{"x":1}'), ("b", None)], [], None]
    assert pylance.dataset(mine).to_table().equals(expected) and ours.dataset(theirs).to_table().equals(expected)


def test_we_modify_pylances_json_dataset(tmp_path):
    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, TEXTS), uri, max_rows_per_file=10)
    ours.write_dataset(_table(100, TEXTS[:5]), uri, mode="append")
    ours.dataset(uri).delete("id % 4 = 1")
    ours.dataset(uri).update({"id": "id + 1000"}, where="id = 2")
    changed = _table(100, ['{"changed": true}'] * 3)
    ours.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(changed)
    assert ours.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000).fragments_removed > 1
    rows = {r["id"]: r for r in _table(0, TEXTS).to_pylist() + _table(100, TEXTS[:5]).to_pylist() if r["id"] % 4 != 1}
    rows[1002] = {**rows.pop(2), "id": 1002}
    rows.update({r["id"]: r for r in changed.to_pylist()})
    expected = {k: jsonb.decode_value(jsonb.encode_value(v["doc"])) if v["doc"] else None for k, v in rows.items()}
    for reader in (ours, pylance):
        table = reader.dataset(uri).to_table()
        assert dict(zip(table.column("id").to_pylist(), table.column("doc").to_pylist())) == expected
    pylance.write_dataset(_table(200, TEXTS[:3]), uri, mode="append")  # pylance carries on
    assert ours.dataset(uri).to_table().equals(pylance.dataset(uri).to_table())


@pytest.mark.parametrize("text, message", [("{bad", "not a JSON value"), ('{"a": 1, "a": 2}', "duplicate object key")])
def test_values_that_are_not_json_are_refused_before_anything_is_committed(tmp_path, text, message):
    uri = str(tmp_path / "ds")
    ours.write_dataset(_table(0, TEXTS[:3]), uri)
    with pytest.raises(ours.InvalidInputError, match=message):
        ours.write_dataset(_table(10, [text]), uri, mode="append")
    assert ours.dataset(uri).version == 1 and ours.dataset(uri).count_rows() == 3


def test_legacy_datasets_with_json_as_pylance(tmp_path):
    """pylance writes JSON in legacy files too, as JSONB, but cannot read it back from inside lists
    ("column types must match schema types"): we read and write it as pylance does, and refuse JSON
    in lists there before anything is written."""
    theirs, mine = str(tmp_path / "theirs"), str(tmp_path / "mine")
    table = _table(0, TEXTS).drop_columns(["docs"])
    pylance.write_dataset(table, theirs, data_storage_version="legacy")
    expected = pylance.dataset(theirs).to_table()
    assert ours.dataset(theirs).to_table().equals(expected)
    ours.write_dataset(table, mine, data_storage_version="legacy")
    assert pylance.dataset(mine).to_table().equals(expected) and _stored(mine) == _stored(theirs)
    ours.write_dataset(table, theirs, mode="append")
    ours.dataset(theirs).optimize.compact_files()
    assert pylance.dataset(theirs).to_table().equals(pa.concat_tables([expected, expected]))
    with pytest.raises(ours.UnsupportedFeatureError, match="JSON inside lists"):
        ours.write_dataset(_table(0, TEXTS), str(tmp_path / "lists"), data_storage_version="legacy")
    assert not os.path.exists(tmp_path / "lists")


def test_jsonb_bytes_are_pylances():
    """Byte for byte what pylance 14 stored for these texts (read off its files), and the text it
    reads back."""
    cases = [
        ('{"aa":1,"b":2,"B":3,"ab":4}', ("4000000410000001100000021000000210000001200000022000000220000002200000024261616"
                                         "162625003500150045002"), '{"B":3,"aa":1,"ab":4,"b":2}'),
        ("-129", "200000002000000340ff7f", "-129"),
        ("65536", "20000000200000055000010000", "65536"),
        ("123456789012345678901", "200000002000000960441ac53a7e04bcda", "1.2345678901234568e+20"),
        ('[1,[2,[3]],{"x":null}]', ("8000000320000002500000185000000d500180000002200000025000000a50028000000120000002"
                                    "500340000001100000010000000078"), '[1,[2,[3]],{"x":null}]'),
        ("[]", "80000000", "[]"),
        ("null", "2000000000000000", "null"),
    ]
    for text, stored, read in cases:
        assert jsonb.encode_value(text).hex() == stored, text
        assert jsonb.decode_value(bytes.fromhex(stored)) == read, text
    with pytest.raises(ours.CorruptFileError, match="malformed JSONB"):
        jsonb.decode_value(b"\x40\x00\x00\x05\x00")
