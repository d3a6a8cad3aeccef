"""Scanner, take and filter kernels on datasets we write (pylance comparisons: tests/interop)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance import core
from airflow_lance.core.errors import InvalidInputError, NegativeIndexError, RowIndexError
from airflow_lance.core.filter import to_expression


@pytest.fixture
def written(tmp_path):
    uri = str(tmp_path / "ds")
    ids = np.arange(300)
    data = pa.table({"id": ids, "s": pa.array([f"s{i % 13}" for i in ids])})
    ds = core.write_dataset(data, uri, max_rows_per_file=64)
    ds.delete("id % 5 = 1")
    return core.dataset(uri)


@pytest.fixture
def opened(written, monkeypatch):
    """The names of the data files the store opens (a spy on the real store)."""
    names: list[str] = []
    cls = type(written.store)
    original = cls.open_input

    def spy(self, path, *args, **kwargs):
        names.append(os.path.basename(path))
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(cls, "open_input", spy)
    return names


def test_limit_stops_reading_fragments(written, opened):
    assert written.to_table(filter="id >= 10", limit=5)["id"].to_pylist() == [10, 12, 13, 14, 15]
    assert len(opened) == 1
    live = written.to_table(columns=["id"])["id"].to_pylist()
    opened.clear()
    assert written.to_table(offset=130, limit=5)["id"].to_pylist() == live[130:135]
    assert len(opened) == 1  # the fragments before the offset are skipped from the manifest
    opened.clear()
    assert written.scanner().count_rows() == len(live)
    assert opened == []  # from metadata alone


def test_take_reads_only_the_fragments_it_needs(written, opened):
    live = written.to_table()
    opened.clear()
    assert written.take([200, 3, 200]).equals(live.take([200, 3, 200]))
    assert len(opened) == 2


def test_take_and_rows_by_address_agree_with_the_scan(written):
    full = written.to_table(with_row_id=True, with_row_address=True)
    rng = np.random.default_rng(3)
    positions = rng.integers(0, full.num_rows, 40)
    assert written.take(positions, columns=["id", "s", "_rowid", "_rowaddr"]).equals(full.take(positions))
    addresses = full["_rowaddr"].to_numpy()[positions]
    assert written._take_rows(addresses).equals(full.select(["id", "s"]).take(positions))
    # the address of a deleted row (id 1 is fragment 0, offset 1) is dropped
    assert written._take_rows([1, int(addresses[0])]).equals(full.select(["id", "s"]).take(positions[:1]))


def test_take_errors_are_typed(written):
    with pytest.raises(RowIndexError):
        written.take([written.count_rows()])
    with pytest.raises(NegativeIndexError):
        written.take([-3])
    with pytest.raises(InvalidInputError):
        written.take([1.5])
    with pytest.raises(RowIndexError):
        written._take_rows([200])  # fragment 0 has 64 rows


def test_batch_size_and_reader(written):
    batches = list(written.to_batches(batch_size=10, filter="id > 100", with_row_id=True))
    assert max(b.num_rows for b in batches) == 10
    expected = written.to_table(filter="id > 100", with_row_id=True)
    assert pa.Table.from_batches(batches).equals(expected)
    scanner = written.scanner(filter="id > 100", with_row_id=True)
    assert scanner.projected_schema == expected.schema
    assert scanner.to_reader().read_all().equals(expected)


def _lists() -> pa.Table:
    return pa.table({"tags": pa.array([["x"], ["a", "b"], None, [], ["c", None], ["a"], ["q", "a"]]),
                     "k": pa.array([1, 2, 1, 1, -1, 5, -2])})


def _reference(rows, predicate):
    return [row for row in rows if predicate(row)]


@pytest.mark.parametrize(
    ("sql", "predicate"),
    [
        ("array_has_any(tags, ['a'])", lambda r: r["tags"] is not None and "a" in r["tags"]),
        ("array_has_all(tags, ['a', 'q'])", lambda r: r["tags"] is not None and {"a", "q"} <= set(r["tags"])),
        ("tags[2] = 'a'", lambda r: r["tags"] is not None and len(r["tags"]) >= 2 and r["tags"][1] == "a"),
        ("tags[k] = 'c'", lambda r: r["tags"] is not None and 0 < abs(r["k"]) <= len(r["tags"])
         and r["tags"][r["k"] - 1 if r["k"] > 0 else r["k"]] == "c"),
        ("array_length(tags) = 2", lambda r: r["tags"] is not None and len(r["tags"]) == 2),
    ],
)
def test_list_kernels_on_sliced_and_chunked_tables(sql, predicate):
    table = _lists()
    expression = to_expression(sql, table.schema)
    for variant in (table, table.slice(1, 5), pa.concat_tables([table.slice(0, 3), table.slice(3)])):
        assert variant.filter(expression).to_pylist() == _reference(variant.to_pylist(), predicate)
