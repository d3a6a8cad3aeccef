"""Schema and data evolution side by side with pylance 14, on identical copies of one dataset:
add_columns (SQL, all-null fields, UDFs), drop_columns, alter_columns, merge, merge_columns +
LanceOperation.Merge, DataReplacement; bad input; conflicts with concurrent appends/deletes."""

from __future__ import annotations

import os
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest
from lance.commit import CommitConflictError

import airflow_lance.core as ours
from airflow_lance.core.evolution import next_field_id

VERSIONS = ["legacy", "2.0", "2.1", "2.2"]


def _table(n: int = 10) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    return pa.table({
        "a": ids,
        "b": pa.array([f"s{i}" for i in ids]),
        "s": pa.array([{"x": int(i), "y": float(i) / 2} for i in ids]),
        "f": pa.array((ids * 1.5).astype(np.float32)),
    })


@pytest.fixture(params=[(v, stable) for v in VERSIONS for stable in (False, True)],
                ids=lambda p: f"{p[0]}{'-stable' if p[1] else ''}")
def twins(request, tmp_path):
    """Two identical copies (written by pylance, 3 fragments, deletions in two of them)."""
    version, stable = request.param
    a = str(tmp_path / "theirs.lance")
    pylance.write_dataset(_table(), a, max_rows_per_file=4, data_storage_version=version,
                          enable_stable_row_ids=stable)
    pylance.dataset(a).delete("a = 1 OR a = 6")
    b = str(tmp_path / "ours.lance")
    shutil.copytree(a, b)
    return a, b


def _fields(fields) -> list:
    return [(f.name(), f.id(), _fields(f.children())) for f in fields]


def _snapshot(uri: str) -> dict:
    """What pylance sees of a dataset's latest version."""
    p = pylance.dataset(uri)
    txn = p.read_transaction(p.version)
    return {
        "rows": p.to_table(),
        "schema": p.schema,
        "field_ids": _fields(p.lance_schema.fields()),
        "files": [[(list(d.fields), list(d.column_indices)) for d in f.metadata.files] for f in p.get_fragments()],
        "fragments": [(f.metadata.id, f.metadata.physical_rows) for f in p.get_fragments()],
        "version": p.version,
        "operation": type(txn.operation).__name__,
        "preserves_nullability": getattr(txn.operation, "preserves_nullability", None),
        "row_ids": p.to_table(columns=["a"], with_row_id=True).column("_rowid").to_pylist(),
        "row_versions": _row_versions(p),
    }


def _row_versions(p) -> dict:
    """Created-at / last-updated-at versions of each row, as pylance reads them."""
    return p.to_table(columns=["_row_created_at_version", "_row_last_updated_at_version"]).to_pydict()


def _same(theirs: str, ours_uri: str) -> None:
    t, o = _snapshot(theirs), _snapshot(ours_uri)
    assert o["rows"].equals(t["rows"]), (o["rows"].to_pydict(), t["rows"].to_pydict())
    assert o == t
    # and we read both as pylance does
    for uri in (theirs, ours_uri):
        assert ours.dataset(uri).to_table().equals(t["rows"])
        assert ours.dataset(uri).schema.equals(t["schema"], check_metadata=True)


def _listing(uri: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), uri) for d, _, fs in os.walk(uri) for f in fs)


def _both(twins, op) -> None:
    """``op`` on pylance's copy and on ours: the same result, or both refuse (ours with a typed
    error that is also what pylance raised, and nothing written)."""
    theirs, mine = twins
    handle = ours.dataset(mine)
    before = handle.version
    try:
        op(pylance.dataset(theirs), pylance)
    except Exception as their_error:
        listing = _listing(mine)
        with pytest.raises(ours.SchemaEvolutionError) as our_error:
            op(handle, ours)
        assert isinstance(our_error.value, type(their_error)), (our_error.value, their_error)
        assert _listing(mine) == listing and handle.version == before
        return
    op(handle, ours)
    assert handle.version == before + 1  # the handle moved to its own commit
    _same(theirs, mine)


@pytest.mark.parametrize("transforms", [
    {"c": "a * 2 + 1"},
    {"c": "b", "d": "f * 2", "e": "a > 4"},
    {"c": "s.x + a"},
], ids=["arith", "several", "nested"])
def test_add_columns_sql(twins, transforms):
    _both(twins, lambda ds, lib: ds.add_columns(transforms))


@pytest.mark.parametrize("fields", [
    pa.field("n", pa.int32()),
    [pa.field("n", pa.string()), pa.field("m", pa.list_(pa.int64()))],
    pa.schema([pa.field("t", pa.struct([("p", pa.int16()), ("q", pa.float64())]))]),
], ids=["field", "list", "schema"])
def test_add_all_null_columns_is_metadata_only(twins, fields):
    theirs, mine = twins
    files_before = sorted(os.listdir(os.path.join(mine, "data")))
    _both(twins, lambda ds, lib: ds.add_columns(fields))  # legacy datasets: both refuse
    assert sorted(os.listdir(os.path.join(mine, "data"))) == files_before


def _udf_body(batch: pa.RecordBatch) -> pa.RecordBatch:
    a = batch.column("a").to_numpy()
    return pa.record_batch([pa.array(a * 10), pa.array([str(v) for v in a])], names=["u", "v"])


def test_add_columns_batch_udf(twins):
    schema = pa.schema([("u", pa.int64()), ("v", pa.string())])
    _both(twins, lambda ds, lib: ds.add_columns(lib.batch_udf(output_schema=schema)(_udf_body),
                                                read_columns=["a"], batch_size=3))


def test_add_columns_plain_callable_and_pandas(twins):
    def udf(batch):
        return batch.to_pandas()[["a"]].rename(columns={"a": "w"}) * 3

    _both(twins, lambda ds, lib: ds.add_columns(udf, read_columns=["a"]))


def test_add_columns_udf_sees_row_addresses_as_pylance(twins):
    def udf(batch):
        return pa.record_batch([batch.column("_rowaddr")], names=["addr"])

    _both(twins, lambda ds, lib: ds.add_columns(udf, read_columns=["a", "_rowaddr"]))


def test_udf_checkpoint_resumes_and_is_removed(twins, tmp_path):
    _theirs, mine = twins
    checkpoint = tmp_path / "cache.sqlite"
    calls = []
    failed = []

    def flaky(batch):
        calls.append(batch.num_rows)
        if len(calls) == 3 and not failed:
            failed.append(True)
            raise RuntimeError("worker died")
        return pa.record_batch([pa.array(batch.column("a").to_numpy() + 1)], names=["g"])

    schema = pa.schema([("g", pa.int64())])
    ds = ours.dataset(mine)
    with pytest.raises(RuntimeError):
        ds.add_columns(ours.batch_udf(schema, checkpoint_file=checkpoint)(flaky), read_columns=["a"], batch_size=2)
    assert ds.version == 2 and checkpoint.exists()
    done = len(calls) - 1
    calls.clear()
    ds.add_columns(ours.batch_udf(schema, checkpoint_file=checkpoint)(flaky), read_columns=["a"], batch_size=2)
    # resumed: the batches computed before the failure were not computed again
    total_batches = sum(-(-f.physical_rows // 2) for f in ds.get_fragments())
    assert len(calls) == total_batches - done
    assert not checkpoint.exists()
    expected = pylance.dataset(mine).to_table(columns={"g": "a + 1"}).column("g")
    assert pylance.dataset(mine).to_table().column("g").equals(expected)


def test_drop_columns(twins):
    _both(twins, lambda ds, lib: ds.drop_columns(["b", "s.y"]))


def test_drop_then_add_never_reuses_a_stored_field_id(twins):
    def op(ds, lib):
        ds.add_columns({"c": "a + 1"})
        ds.drop_columns(["c"])
        ds.add_columns({"d": "a + 2"})

    theirs, mine = twins
    op(pylance.dataset(theirs), pylance)
    op(ours.dataset(mine), ours)
    _same(theirs, mine)
    assert next_field_id(ours.dataset(mine)._manifest) == next_field_id(ours.dataset(theirs)._manifest)


@pytest.mark.parametrize("alterations", [
    [{"path": "b", "name": "b2"}],
    [{"path": "s.x", "name": "xx"}, {"path": "a", "nullable": True}],
    [{"path": "a", "data_type": pa.int32()}],
    [{"path": "f", "data_type": pa.float64(), "name": "f64"}, {"path": "b", "data_type": pa.large_string()}],
], ids=["rename", "nested-rename", "cast", "cast-rename-two"])
def test_alter_columns(twins, alterations):
    _both(twins, lambda ds, lib: ds.alter_columns(*alterations))


def test_cast_of_a_column_alone_in_its_files_drops_those_files(twins):
    def op(ds, lib):
        ds.add_columns({"c": "a * 3"})
        ds.alter_columns({"path": "c", "data_type": pa.int16()})

    theirs, mine = twins
    op(pylance.dataset(theirs), pylance)
    op(ours.dataset(mine), ours)
    _same(theirs, mine)


def test_non_nullable_when_no_nulls(tmp_path):
    theirs, mine = str(tmp_path / "t"), str(tmp_path / "o")
    pylance.write_dataset(_table(), theirs, data_storage_version="2.2")
    shutil.copytree(theirs, mine)
    _both((theirs, mine), lambda ds, lib: ds.alter_columns({"path": "a", "nullable": False}))


@pytest.mark.parametrize(("data", "left_on", "right_on"), [
    (pa.table({"a": [0, 2, 3, 99], "m": ["x", "y", "z", "w"]}), "a", None),
    (pa.table({"k": [5, 4, 9, 4], "m": [1.5, 2.5, 3.5, 4.5], "n": [1, 2, 3, 4]}), "a", "k"),  # repeated key
    (pa.table({"key": ["s3", "s8"], "z": [True, False]}), "b", "key"),
], ids=["same-key", "right_on-repeated", "string-key"])
def test_merge(twins, data, left_on, right_on):
    _both(twins, lambda ds, lib: ds.merge(data, left_on, right_on))


def test_merge_columns_then_one_merge_commit(twins):
    """The distributed form: new columns per fragment, one commit; each side reads the other's."""
    theirs, mine = twins

    def run(lib, uri):
        ds = lib.dataset(uri)
        results = [fragment.merge_columns({"c": "a * 7"}, columns=["a"]) for fragment in ds.get_fragments()]
        schema = results[0][1]
        op = lib.LanceOperation.Merge([fragment for fragment, _ in results], schema)
        lib.LanceDataset.commit(uri, op, read_version=ds.version)

    run(pylance, theirs)
    run(ours, mine)
    t, o = _snapshot(theirs), _snapshot(mine)
    for key in ("rows", "schema", "field_ids", "files", "fragments", "version", "operation", "row_ids"):
        assert o[key] == t[key], key


def test_pylance_merge_columns_committed_by_us(twins):
    theirs, _mine = twins
    ds = pylance.dataset(theirs)
    results = [f.merge_columns({"c": "a + 100"}, columns=["a"]) for f in ds.get_fragments()]
    fragments = [ours.FragmentMetadata.from_json(f.to_json()) for f, _ in results]
    schema = ours.dataset(theirs).lance_schema
    extended = ours.LanceSchema.from_arrow(results[0][1].to_pyarrow())  # names and types
    import airflow_lance.core.evolution as evolution

    added = evolution.new_columns_schema(schema, pa.schema([extended.to_arrow().field("c")]),
                                         evolution.next_field_id(ours.dataset(theirs)._manifest))
    new = ours.LanceDataset.commit(theirs, ours.LanceOperation.Merge(fragments, evolution._combined(schema, added)),
                                   read_version=ds.version)
    expected = pylance.dataset(theirs, version=ds.version).to_table(columns={"c": "a + 100"}).column("c")
    assert pylance.dataset(theirs).to_table().column("c").equals(expected)
    assert new.to_table().column("c").equals(expected)


def test_data_replacement_backfills_and_replaces(tmp_path):
    """Add an all-null column, then give two fragments files for it (DataReplacement), then
    replace one of those files again; pylance reads what we commit."""
    uri = str(tmp_path / "r.lance")
    ours.write_dataset(pa.table({"a": np.arange(6)}), uri, max_rows_per_file=2)
    ds = ours.dataset(uri)
    ds.add_columns(pa.field("y", pa.int64()))
    (f0, _), (f1, _) = [ds.get_fragments()[i].merge_columns({"tmp": "a * 10"}) for i in (0, 1)]
    y = ds.lance_schema.top_level()[-1].id
    files = [f0.files[-1], f1.files[-1]]
    # the files were written for the field 'tmp' (the next id): they hold y's values under y's id
    import dataclasses

    files = [dataclasses.replace(f, fields=(y,)) for f in files]
    op = ours.LanceOperation.DataReplacement([ours.LanceOperation.DataReplacementGroup(i, f)
                                              for i, f in zip((0, 1), files)])
    ours.LanceDataset.commit(uri, op, read_version=ds.version)
    assert pylance.dataset(uri).to_table().column("y").to_pylist() == [0, 10, 20, 30, None, None]
    assert ours.dataset(uri).to_table().column("y").to_pylist() == [0, 10, 20, 30, None, None]
    txn = pylance.dataset(uri).read_transaction(pylance.dataset(uri).version)
    assert type(txn.operation).__name__ == "DataReplacement"
    # replace fragment 1's y file with new values
    ds = ours.dataset(uri)
    (g1, _) = ds.get_fragments()[1].merge_columns({"tmp": "a * 100"})
    op = ours.LanceOperation.DataReplacement(
        [ours.LanceOperation.DataReplacementGroup(1, dataclasses.replace(g1.files[-1], fields=(y,)))])
    ours.LanceDataset.commit(uri, op, read_version=ds.version)
    assert pylance.dataset(uri).to_table().column("y").to_pylist() == [0, 10, 200, 300, None, None]
    assert [len(f.metadata.files) for f in pylance.dataset(uri).get_fragments()] == [2, 2, 1]


def _backfill_setup(uri: str) -> tuple[int, ours.DataFile]:
    """Three fragments of ``id``/``a``, an all-null ``y``, a BTREE on ``id`` (so a partial merge
    insert updates in place, as pylance 14 does), and a file of ``y`` values for fragment 0 written
    at the returned read version (not committed)."""
    import dataclasses

    ours.write_dataset(pa.table({"id": np.arange(6), "a": np.arange(6)}), uri, max_rows_per_file=2)
    ours.dataset(uri).add_columns(pa.field("y", pa.int64()))
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    ds = ours.dataset(uri)
    (written, _), = [ds.get_fragments()[0].merge_columns({"tmp": "a * 10"})]
    y = ds.lance_schema.top_level()[-1].id
    return ds.version, dataclasses.replace(written.files[-1], fields=(y,))


def _upsert(column: str, ids: list[int]):
    table = pa.table({"id": pa.array(ids, pa.int64()), column: pa.array([70 + i for i in ids], pa.int64())})
    return lambda ds: ds.merge_insert("id").when_matched_update_all().execute(table)


CONCURRENT = {
    "deletion vector on the target": lambda ds: ds.delete("id = 0"),
    "deletion vector elsewhere": lambda ds: ds.delete("id = 2"),
    "target fragment deleted": lambda ds: ds.delete("id < 2"),
    "rows moved out of the target": lambda ds: ds.update({"a": "a + 100"}, "id = 1"),
    "target fragment rewritten by update": lambda ds: ds.update({"a": "a + 100"}, "id < 2"),
    "rows moved out elsewhere": lambda ds: ds.update({"a": "a + 100"}, "id = 3"),
    "replaced column updated in place": _upsert("y", [1]),
    "replaced column updated in place elsewhere": _upsert("y", [3]),
    "other column updated in place": _upsert("a", [1]),
    "columns added": lambda ds: ds.add_columns({"z": "a + 1"}),
    "index on another column": lambda ds: ds.create_scalar_index("a", "BTREE"),
    "index on the replaced column": lambda ds: ds.create_scalar_index("y", "BTREE"),
    "replaced column dropped": lambda ds: ds.drop_columns(["y"]),
    "other column dropped": lambda ds: ds.drop_columns(["a"]),
    "compaction": lambda ds: ds.optimize.compact_files(target_rows_per_fragment=100),
}


def _outcome(commit, *args, **kwargs) -> str:
    try:
        commit(*args, **kwargs)
    except CommitConflictError as exc:  # pylance's: one class, the message says which
        return "incompatible" if "Incompatible transaction" in str(exc) else "retry"
    except ours.IncompatibleTransactionError:
        return "incompatible"
    except ours.CommitConflictError:
        return "retry"
    return "committed"


@pytest.mark.parametrize("concurrent", list(CONCURRENT))
def test_a_backfill_over_concurrent_writes_conflicts_as_pylance(tmp_path, concurrent):
    """A DataReplacement planned before a concurrent write: pylance 14 and our core commit, retry or
    refuse alike, and what both commit reads the same. Before December 2026 ours committed over an
    update that moved rows out of the target (their copies kept null) or rewrote the column in place
    (our file undid the update), over a drop of the column and over any merge, and retried over an
    index on another column."""
    base = str(tmp_path / "base.lance")
    read_version, file = _backfill_setup(base)
    outcomes, tables = {}, {}
    for engine in ("pylance", "ours"):
        uri = str(tmp_path / engine)
        shutil.copytree(base, uri)
        CONCURRENT[concurrent](pylance.dataset(uri))
        if engine == "pylance":
            data_file = pylance.fragment.DataFile(file.path, list(file.fields), list(file.column_indices),
                                                  file.file_major_version, file.file_minor_version)
            op = pylance.LanceOperation.DataReplacement([pylance.LanceOperation.DataReplacementGroup(0, data_file)])
            outcomes[engine] = _outcome(pylance.LanceDataset.commit, uri, op, read_version=read_version)
        else:
            op = ours.LanceOperation.DataReplacement([ours.LanceOperation.DataReplacementGroup(0, file)])
            outcomes[engine] = _outcome(ours.LanceDataset.commit, uri, op, read_version=read_version)
        tables[engine] = pylance.dataset(uri).to_table().sort_by("id")
    assert outcomes["ours"] == outcomes["pylance"]
    assert tables["ours"].equals(tables["pylance"])
    if outcomes["ours"] == "committed" and "y" in tables["ours"].column_names:
        ds = ours.dataset(str(tmp_path / "ours"))
        assert ds.to_table().sort_by("id").equals(tables["pylance"])


# -- bad input: a typed error, as pylance's builtin, and nothing written -----------------------------------------


BAD = [
    ("add existing column", lambda ds: ds.add_columns({"a": "b"})),
    ("add unknown column", lambda ds: ds.add_columns({"c": "zz + 1"})),
    ("add bad sql", lambda ds: ds.add_columns({"c": "a +* 1"})),
    ("add existing field", lambda ds: ds.add_columns(pa.field("a", pa.int32()))),
    ("drop unknown", lambda ds: ds.drop_columns(["zz"])),
    ("drop all", lambda ds: ds.drop_columns(["a", "b", "s", "f"])),
    ("alter unknown", lambda ds: ds.alter_columns({"path": "zz", "name": "y"})),
    ("alter to an existing name", lambda ds: ds.alter_columns({"path": "a", "name": "b"})),
    ("alter bad cast", lambda ds: ds.alter_columns({"path": "a", "data_type": pa.string()})),
    ("merge unknown key", lambda ds: ds.merge(pa.table({"k": [1], "x": [1]}), "zz", "k")),
    ("merge existing column", lambda ds: ds.merge(pa.table({"a": [1], "b": ["x"]}), "a")),
    ("merge key type", lambda ds: ds.merge(pa.table({"a": ["1"], "x": [1]}), "a")),
]


@pytest.mark.parametrize(("label", "op"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_before_writing(tmp_path, label, op):
    theirs, mine = str(tmp_path / "t"), str(tmp_path / "o")
    pylance.write_dataset(_table(), theirs, max_rows_per_file=4, data_storage_version="2.2")
    shutil.copytree(theirs, mine)
    with pytest.raises(Exception) as their_error:
        op(pylance.dataset(theirs))
    before = _listing(mine)
    handle = ours.dataset(mine)
    with pytest.raises(ours.SchemaEvolutionError) as our_error:
        op(handle)
    assert isinstance(our_error.value, type(their_error.value)), (our_error.value, their_error.value)
    assert _listing(mine) == before and handle.version == 1


def test_a_cast_of_an_indexed_column_is_refused_as_pylance(tmp_path):
    """pylance 14 refuses to cast a column an index is built on. Until December 2026 ours cast it
    and left the index on the old field id: every filtered scan in pylance then failed."""
    theirs, mine = str(tmp_path / "t"), str(tmp_path / "o")
    pylance.write_dataset(_table(), theirs, max_rows_per_file=4)
    pylance.dataset(theirs).create_scalar_index("a", "BTREE")
    shutil.copytree(theirs, mine)
    cast = {"path": "a", "data_type": pa.int32()}
    with pytest.raises(OSError) as their_error:
        pylance.dataset(theirs).alter_columns(cast)
    assert "a_idx" in str(their_error.value)
    before = _listing(mine)
    handle = ours.dataset(mine)
    with pytest.raises(ours.SchemaEvolutionError, match="a_idx") as our_error:
        handle.alter_columns(cast)
    assert isinstance(our_error.value, OSError)
    assert _listing(mine) == before and handle.version == 2
    handle.drop_index("a_idx")
    handle.alter_columns(cast)  # as pylance asks: drop the index, cast, index again
    handle.create_scalar_index("a", "BTREE")
    ds = pylance.dataset(mine)
    ds.validate()
    assert ds.schema.field("a").type == pa.int32()
    assert ds.to_table(filter="a = 3", columns=["b"]).column("b").to_pylist() == ["s3"]


@pytest.mark.parametrize("index_type", ["BTREE", "IVF_FLAT"])
def test_an_index_planned_before_a_concurrent_cast_is_built_on_the_cast_column(tmp_path, index_type):
    """Our handle plans an index, pylance casts the column meanwhile (a new field id): the retry
    builds the index on the cast column. Until December 2026 it kept the old field id, and every
    filtered scan in pylance then failed (pylance 14 commits such an index itself)."""
    uri = str(tmp_path / "c.lance")
    ids = np.arange(64)
    vectors = np.random.default_rng(3).standard_normal((64, 8)).astype(np.float32)
    pylance.write_dataset(pa.table({"a": ids, "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8)}),
                          uri, max_rows_per_file=32)
    handle = ours.dataset(uri)
    if index_type == "BTREE":
        pylance.dataset(uri).alter_columns({"path": "a", "data_type": pa.int32()})
        handle.create_scalar_index("a", "BTREE")
    else:
        pylance.dataset(uri).alter_columns({"path": "v", "data_type": pa.list_(pa.float16(), 8)})
        handle.create_index("v", "IVF_FLAT", num_partitions=2)
    ds = pylance.dataset(uri)
    ds.validate()
    [index] = ds.describe_indices()
    column = "a" if index_type == "BTREE" else "v"
    assert index.field_names == [column]
    assert ours.dataset(uri).lance_schema.top_level()[-1 if column == "v" else 0].id in index.fields
    if index_type == "BTREE":
        assert ds.to_table(filter="a = 7", columns=["a"]).column("a").to_pylist() == [7]
    else:
        query = {"column": "v", "q": vectors[5].astype(np.float16), "k": 3}
        assert ds.to_table(nearest={**query, "nprobes": 2}, columns=["a"]).column("a").to_pylist() == \
            ds.to_table(nearest={**query, "use_index": False}, columns=["a"]).column("a").to_pylist()


def test_udf_with_wrong_output_is_refused_before_commit(twins):
    _theirs, mine = twins
    schema = pa.schema([("u", pa.int64())])
    handle = ours.dataset(mine)
    with pytest.raises(ours.SchemaEvolutionError):
        handle.add_columns(ours.batch_udf(schema)(lambda b: pa.record_batch([pa.array(["x"] * b.num_rows)], ["u"])))
    with pytest.raises(ours.InvalidTransformError) as error:
        handle.add_columns(lambda b: 1 / 0)
    assert isinstance(error.value, TypeError)  # as pylance's
    with pytest.raises(ours.SchemaEvolutionError):
        handle.add_columns(lambda b: pa.record_batch([pa.array([1])], ["u"]))  # wrong row count
    assert handle.version == ours.dataset(mine).version == 2


# -- conflicts (pylance 14's rules, both directions) ------------------------------------------------------------


@pytest.mark.parametrize("writer", ["ours", "pylance"])
def test_append_after_a_concurrent_add_columns_commits(tmp_path, writer):
    """An Append planned before a Merge that introduces only nullable columns commits after it
    (pylance 14: ``preserves_nullability``); its rows read the new column as null."""
    uri = str(tmp_path / "c.lance")
    ours.write_dataset(pa.table({"a": np.arange(6)}), uri, max_rows_per_file=3)
    fragments = ours.write_fragments(pa.table({"a": [100]}), uri)
    (ours.dataset(uri) if writer == "ours" else pylance.dataset(uri)).add_columns({"b": "a * 2"})
    new = ours.LanceDataset.commit(uri, ours.LanceOperation.Append(fragments), read_version=1)
    expected = {"a": [0, 1, 2, 3, 4, 5, 100], "b": [0, 2, 4, 6, 8, 10, None]}
    assert new.to_table().to_pydict() == expected == pylance.dataset(uri).to_table().to_pydict()


def test_add_columns_redoes_itself_over_a_concurrent_append_and_delete(tmp_path):
    """A Merge cannot commit over an Append or Delete (Lance: retryable): add_columns re-plans on
    the latest version, so nothing is lost or resurrected."""
    uri = str(tmp_path / "c.lance")
    ours.write_dataset(pa.table({"a": np.arange(6)}), uri, max_rows_per_file=3)
    stale = ours.dataset(uri)
    pylance.write_dataset(pa.table({"a": [100]}), uri, mode="append")
    pylance.dataset(uri).delete("a = 4")
    stale.add_columns({"b": "a + 1"})
    assert stale.version == 4
    expected = {"a": [0, 1, 2, 3, 5, 100], "b": [1, 2, 3, 4, 6, 101]}
    assert pylance.dataset(uri).to_table().to_pydict() == expected == ours.dataset(uri).to_table().to_pydict()


def test_a_merge_planned_before_an_append_is_a_retryable_conflict(tmp_path):
    uri = str(tmp_path / "c.lance")
    ours.write_dataset(pa.table({"a": np.arange(6)}), uri, max_rows_per_file=3)
    ds = ours.dataset(uri)
    results = [f.merge_columns({"b": "a * 2"}) for f in ds.get_fragments()]
    pylance.write_dataset(pa.table({"a": [100]}), uri, mode="append")
    with pytest.raises(ours.CommitConflictError):
        ours.LanceDataset.commit(uri, ours.LanceOperation.Merge([f for f, _ in results], results[0][1], True),
                                 read_version=1)
    assert pylance.dataset(uri).version == 2


def test_drop_columns_commits_over_a_concurrent_delete(tmp_path):
    uri = str(tmp_path / "c.lance")
    ours.write_dataset(pa.table({"a": np.arange(6), "b": np.arange(6) * 2}), uri, max_rows_per_file=3)
    stale = ours.dataset(uri)
    pylance.dataset(uri).delete("a = 1")
    stale.drop_columns(["b"])
    assert pylance.dataset(uri).to_table().to_pydict() == {"a": [0, 2, 3, 4, 5]}


def test_files_of_a_plan_lost_to_a_conflict_are_removed(tmp_path):
    uri = str(tmp_path / "c.lance")
    ours.write_dataset(pa.table({"a": np.arange(6)}), uri, max_rows_per_file=3)
    stale = ours.dataset(uri)
    pylance.write_dataset(pa.table({"a": [100]}), uri, mode="append")
    stale.add_columns({"b": "a + 1"})
    referenced = {d.path for f in pylance.dataset(uri).get_fragments() for d in f.metadata.files}
    # first attempt (2 files, planned on version 1) lost to the append: only the second's files remain
    assert set(os.listdir(os.path.join(uri, "data"))) == referenced


@pytest.mark.parametrize("compactor", ["ours", "pylance"])
def test_compaction_after_evolution(twins, compactor):
    """Fragments with several data files (added, cast, merged columns; a dropped column's file)
    compact to the same rows, whoever compacts."""
    _theirs, mine = twins
    ds = ours.dataset(mine)
    ds.add_columns({"c": "a * 2"})
    ds.alter_columns({"path": "c", "data_type": pa.int32()})
    ds.merge(pa.table({"a": [0, 5, 9], "m": ["x", "y", "z"]}), "a")
    ds.drop_columns(["b"])
    expected = pylance.dataset(mine).to_table()
    (ours.dataset(mine) if compactor == "ours" else pylance.dataset(mine)).optimize.compact_files(
        target_rows_per_fragment=1000)
    assert len(pylance.dataset(mine).get_fragments()) == 1
    assert pylance.dataset(mine).to_table().equals(expected)
    assert ours.dataset(mine).to_table().equals(expected)


@pytest.mark.parametrize("count", [8, 5, 11], ids=["exact", "too-few", "too-many"])
def test_add_columns_from_a_reader_of_values(twins, count):
    """One value per live row, in order (8 live rows); too few or too many: both refuse."""
    values = pa.table({"r": pa.array(np.arange(count) * 10)})
    _both(twins, lambda ds, lib: ds.add_columns(pa.RecordBatchReader.from_batches(values.schema,
                                                                                  values.to_batches())))


@pytest.mark.parametrize("compactor", ["ours", "pylance"])
def test_add_columns_over_a_concurrent_compaction(tmp_path, compactor):
    """A Merge cannot commit over a Rewrite (retryable): add_columns re-plans on the compacted
    version, and nothing is lost."""
    uri = str(tmp_path / "c.lance")
    pylance.write_dataset(pa.table({"a": np.arange(12)}), uri, max_rows_per_file=3)
    pylance.dataset(uri).delete("a = 4")
    stale = ours.dataset(uri)
    (ours.dataset(uri) if compactor == "ours" else pylance.dataset(uri)).optimize.compact_files(
        target_rows_per_fragment=100)
    stale.add_columns({"b": "a * 2"})
    assert stale.version == pylance.dataset(uri).version and len(pylance.dataset(uri).get_fragments()) == 1
    kinds = [stale.read_transaction(v).kind for v in range(3, stale.version + 1)]
    assert "rewrite" in kinds and kinds[-1] == "merge"
    expected = {"a": [i for i in range(12) if i != 4], "b": [2 * i for i in range(12) if i != 4]}
    assert pylance.dataset(uri).to_table().to_pydict() == expected == ours.dataset(uri).to_table().to_pydict()


def test_drop_columns_over_a_concurrent_add_columns_replans(tmp_path):
    uri = str(tmp_path / "c.lance")
    ours.write_dataset(pa.table({"a": np.arange(6), "b": np.arange(6)}), uri, max_rows_per_file=3)
    stale = ours.dataset(uri)
    pylance.dataset(uri).add_columns({"c": "a + b"})
    stale.drop_columns(["b"])
    assert pylance.dataset(uri).to_table().to_pydict() == {"a": list(range(6)), "c": [2 * i for i in range(6)]}


def test_add_columns_udf_sees_row_ids_as_pylance(twins):
    def udf(batch):
        return pa.record_batch([batch.column("_rowid")], names=["rid"])

    _both(twins, lambda ds, lib: ds.add_columns(udf, read_columns=["_rowid", "a"]))


def test_all_null_schema_with_metadata(twins):
    schema = pa.schema([pa.field("n", pa.int32(), metadata={"unit": "m"})], metadata={"origin": "test"})
    _both(twins, lambda ds, lib: ds.add_columns(schema))


def test_writers_take_turns(twins):
    """A chain of evolutions where ours and pylance alternate ends exactly as pylance's alone."""
    steps = [
        lambda ds: ds.add_columns({"c": "a * 2"}),
        lambda ds: ds.drop_columns(["b"]),
        lambda ds: ds.add_columns({"n": "f * 2"}),
        lambda ds: ds.alter_columns({"path": "c", "data_type": pa.int32(), "name": "c32"}),
        lambda ds: ds.merge(pa.table({"a": [0, 3, 7], "m": ["x", "y", "z"]}), "a"),  # string nulls: legacy too
        lambda ds: ds.alter_columns({"path": "s.x", "name": "sx"}),
    ]
    theirs, mine = twins
    for step in steps:
        step(pylance.dataset(theirs))
    try:
        for i, step in enumerate(steps):
            step(ours.dataset(mine) if i % 2 == 0 else pylance.dataset(mine))
    except ours.SchemaEvolutionError:
        pytest.fail("our step failed where pylance's succeeded")
    _same(theirs, mine)
