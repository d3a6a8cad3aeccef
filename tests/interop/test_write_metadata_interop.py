"""Issue 17 items 4 and 5 side by side with pylance: write inputs and options, fragment
operations, config and metadata. Each case runs ours and pylance's on identical copies (or on
the same inputs in two directories) and compares what pylance reads from both."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil

import lance as pylance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset  # noqa: F401 - pa.dataset inputs
import pytest

import airflow_lance.core as ours
from airflow_lance.core.auto_cleanup import format_duration, parse_duration
from airflow_lance.core.file.legacy import LegacyFile

STORAGE_VERSIONS = ["2.0", "2.2"]


def _table(n: int = 3000, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": ids,
        "score": pa.array(rng.normal(size=n), mask=rng.random(n) < 0.1),
        "text": pa.array([f"r{i}" if i % 7 else None for i in ids]),
        "s": pa.array([{"x": int(i), "y": f"y{i}"} for i in ids]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 2, dtype=np.float32)), 2),
    })


def _listing(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def _field_ids(uri: str) -> list[tuple[str, int, int]]:
    return [(f.name, f.id, f.parent_id) for f in ours.dataset(uri).lance_schema.fields]


def _same_dataset(a: str, b: str) -> None:
    """pylance reads both identically: rows, schema (with metadata), field ids, versions, config."""
    pa_, pb = pylance.dataset(a), pylance.dataset(b)
    assert pa_.to_table().equals(pb.to_table())
    assert pa_.schema.equals(pb.schema, check_metadata=True)
    assert _field_ids(a) == _field_ids(b)
    assert [v["version"] for v in pa_.versions()] == [v["version"] for v in pb.versions()]
    sizeless = lambda ds: [{k: v for k, v in x["metadata"].items() if k != "total_files_size"}  # noqa: E731
                           for x in ds.versions()]  # our encoder's files differ in size
    assert sizeless(pa_) == sizeless(pb)
    assert pa_.config() == pb.config() and pa_.metadata == pb.metadata
    assert ours.dataset(a).to_table().equals(pa_.to_table())


# -- item 4: inputs ------------------------------------------------------------------------------

def _inputs(tmp_path):
    src = _table(50)
    pylance.write_dataset(src, str(tmp_path / "src_theirs")).delete("id % 3 = 0")  # with deletions
    ours.write_dataset(src, str(tmp_path / "src_ours")).delete("id % 3 = 0")
    rows = [{"id": 1, "text": "a"}, {"id": 2}, {"id": 3, "text": None}]
    return {
        "pandas": lambda: pd.DataFrame({"id": [1, 2, 3], "f": [0.5, None, 2.0], "t": ["a", None, "c"]}),
        "dict": lambda: {"id": [1, 2, 3], "t": ["a", None, "c"]},
        "list_of_dicts": lambda: rows,
        # pylance does not take our handle: its oracle input is its own handle on the same data
        "our_dataset": (lambda: ours.dataset(str(tmp_path / "src_ours")),
                        lambda: pylance.dataset(str(tmp_path / "src_ours"))),
        "pylance_dataset": lambda: pylance.dataset(str(tmp_path / "src_theirs")),
        "pyarrow_dataset": lambda: pa.dataset.dataset(src),
    }


@pytest.mark.parametrize("kind", ["pandas", "dict", "list_of_dicts", "our_dataset", "pylance_dataset",
                                  "pyarrow_dataset"])
@pytest.mark.parametrize("version", STORAGE_VERSIONS)
def test_write_inputs_as_pylance(tmp_path, kind, version):
    make = _inputs(tmp_path)[kind]
    mine, theirs = make if isinstance(make, tuple) else (make, make)
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(mine(), a, data_storage_version=version)
    pylance.write_dataset(theirs(), b, data_storage_version=version)
    ours.write_dataset(mine(), a, mode="append")
    pylance.write_dataset(theirs(), b, mode="append")
    _same_dataset(a, b)
    assert pylance.dataset(a).data_storage_version == version
    if kind.endswith("_dataset") and kind != "pyarrow_dataset":
        assert pylance.dataset(a).count_rows() == 2 * 33  # deleted rows are not copied


def test_pandas_with_schema_and_index(tmp_path):
    frame = pd.DataFrame({"v": [1, 2, 3]}, index=[10, 20, 30])
    schema = pa.schema([("v", pa.int32())])
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(frame, a, schema=schema)
    pylance.write_dataset(frame, b, schema=schema)
    _same_dataset(a, b)


def test_bad_inputs_write_nothing(tmp_path):
    a = str(tmp_path / "ours")
    for bad in ({"a": [1], "b": [1, 2]}, [{"a": 1}, {"a": "x"}], 42):
        with pytest.raises(ours.InvalidInputError) as err:
            ours.write_dataset(bad, a)
        assert isinstance(err.value, ValueError)
    assert not os.path.exists(a)
    ours.write_dataset({"a": [1]}, a)
    before = _listing(a)
    with pytest.raises(ours.SchemaMismatchError):
        ours.write_dataset(pd.DataFrame({"a": ["x"]}), a, mode="append")
    assert _listing(a) == before


# -- item 4: options -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", STORAGE_VERSIONS)
def test_stable_row_ids_as_pylance(tmp_path, version):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(_table(1000), a, enable_stable_row_ids=True, data_storage_version=version,
                       max_rows_per_file=400)
    pylance.write_dataset(_table(1000), b, enable_stable_row_ids=True, data_storage_version=version,
                          max_rows_per_file=400)
    for uri in (a, b):  # appends by both libraries, a delete by pylance, then a compaction by ours
        ours.write_dataset(_table(100, 1000), uri, mode="append")
        pylance.write_dataset(_table(100, 1100), uri, mode="append")
        pylance.dataset(uri).delete("id % 5 = 0")
        ours.dataset(uri).optimize.compact_files()
    _same_dataset(a, b)
    meta = ["id", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
    ta, tb = pylance.dataset(a).to_table(columns=meta), pylance.dataset(b).to_table(columns=meta)
    assert ta.equals(tb)
    assert set(ta.column("_row_created_at_version").to_pylist()) == {1, 2, 3}
    assert ta.column("_rowid").to_pylist()[:3] == [1, 2, 3]  # id 0 was deleted: ids stay
    # an overwrite keeps the dataset's choice, as pylance's
    ours.write_dataset(_table(5), a, mode="overwrite")
    pylance.write_dataset(_table(5), b, mode="overwrite")
    assert pylance.dataset(a).to_table(with_row_id=True).equals(pylance.dataset(b).to_table(with_row_id=True))


def test_stable_row_ids_only_when_creating(tmp_path):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for write in (ours.write_dataset, pylance.write_dataset):
        write(_table(5), a if write is ours.write_dataset else b)
        write(_table(5), a if write is ours.write_dataset else b, mode="overwrite", enable_stable_row_ids=True)
    assert (pylance.dataset(a).to_table(with_row_id=True).column("_rowid")
            .equals(pylance.dataset(b).to_table(with_row_id=True).column("_rowid")))


@pytest.mark.parametrize("migrate_with", ["ours", "pylance"])
def test_v1_manifest_paths_and_migration(tmp_path, migrate_with):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(_table(10), a, enable_v2_manifest_paths=False)
    pylance.write_dataset(_table(10), b, enable_v2_manifest_paths=False)
    for uri in (a, b):
        pylance.write_dataset(_table(10, 10), uri, mode="append")
        ours.write_dataset(_table(10, 20), uri, mode="append")
    names = lambda uri: sorted(n for n in os.listdir(os.path.join(uri, "_versions")) if n.endswith(".manifest"))  # noqa: E731
    assert names(a) == names(b) == ["1.manifest", "2.manifest", "3.manifest"]
    _same_dataset(a, b)
    copy = str(tmp_path / "copy")
    shutil.copytree(a, copy)
    handle = ours.dataset(a) if migrate_with == "ours" else pylance.dataset(a)
    handle.migrate_manifest_paths_v2()
    pylance.dataset(copy).migrate_manifest_paths_v2()
    assert names(a) == names(copy) == [f"{(1 << 64) - 1 - v:020d}.manifest" for v in (3, 2, 1)]
    assert handle.version == 3 and handle.to_table().equals(pylance.dataset(copy).to_table())
    handle.migrate_manifest_paths_v2()  # idempotent
    assert names(a) == names(copy)
    ours.write_dataset(_table(1, 30), a, mode="append")
    assert pylance.dataset(a).version == 4 and len(names(a)) == 4
    ours.write_dataset(_table(1, 30), str(tmp_path / "v2"))  # default: V2 names, as pylance 14
    assert names(str(tmp_path / "v2")) == [f"{(1 << 64) - 2:020d}.manifest"]


def test_max_rows_per_group_legacy(tmp_path):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(_table(2500), a, data_storage_version="legacy", max_rows_per_group=300)
    pylance.write_dataset(_table(2500), b, data_storage_version="legacy", max_rows_per_group=300)
    _same_dataset(a, b)
    def batch_rows(uri: str) -> list[int]:  # rows of each on-disk batch of the (one) legacy file
        name = os.listdir(os.path.join(uri, "data"))[0]
        path = os.path.join(uri, "data", name)
        with open(path, "rb") as f:
            data = f.read()
        legacy = LegacyFile(lambda o, n: pa.py_buffer(data[o:o + n]), len(data), path)
        return legacy.batch_rows.tolist()

    assert batch_rows(a) == batch_rows(b) == [300] * 8 + [100]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ours.InvalidInputError, match="max_rows_per_group"):
            ours.write_dataset(_table(1), str(tmp_path / "bad"), max_rows_per_group=bad)
    assert not os.path.exists(str(tmp_path / "bad"))


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (1209600, "14days"), (90061, "1day 1h 1m 1s"),
                                           (3600, "1h"), (31_557_600 + 2 * 2_630_016, "1year 2months")])
def test_auto_cleanup_options_config_as_pylance(tmp_path, seconds, text):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    options = {"interval": 7, "older_than_seconds": seconds}
    ours.write_dataset(_table(3), a, auto_cleanup_options=options)
    pylance.write_dataset(_table(3), b, auto_cleanup_options=options)
    assert ours.dataset(a).config() == pylance.dataset(b).config() == {
        "lance.auto_cleanup.interval": "7", "lance.auto_cleanup.older_than": text}
    assert format_duration(seconds) == text and parse_duration(text) == dt.timedelta(seconds=seconds)
    # ignored on an existing dataset, as in pylance
    ours.write_dataset(_table(3), a, mode="append", auto_cleanup_options={"interval": 1, "older_than_seconds": 1})
    pylance.write_dataset(_table(3), b, mode="append", auto_cleanup_options={"interval": 1, "older_than_seconds": 1})
    assert ours.dataset(a).config() == pylance.dataset(b).config()


def test_auto_cleanup_runs_on_commit_as_pylance(tmp_path):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(_table(3), a, auto_cleanup_options={"interval": 3, "older_than_seconds": 0})
    pylance.write_dataset(_table(3), b, auto_cleanup_options={"interval": 3, "older_than_seconds": 0})
    for step in range(6):  # commits by both libraries, and a config-only commit
        for uri, write in ((a, ours.write_dataset), (b, pylance.write_dataset)):
            if step == 4:
                (ours.dataset(uri) if uri == a else pylance.dataset(uri)).update_metadata({"step": "4"})
            else:
                write(_table(3, 3 * step), uri, mode="append")
        assert [v["version"] for v in pylance.dataset(a).versions()] == \
            [v["version"] for v in pylance.dataset(b).versions()]
    assert [v["version"] for v in pylance.dataset(a).versions()] == [5, 6, 7]
    _same_dataset(a, b)
    # pylance's commits honour the config we wrote, ours the config pylance wrote
    ours.write_dataset(_table(3), b, mode="append")  # version 8: not due
    assert [v["version"] for v in pylance.dataset(b).versions()] == [5, 6, 7, 8]
    ours.dataset(b).update_config({"x": "1"})  # version 9: due, cleans up to its base (8)
    assert [v["version"] for v in pylance.dataset(b).versions()] == [8, 9]
    ours.dataset(a).update_config({"x": "1"})  # the same two commits, the due one by pylance
    pylance.write_dataset(_table(3), a, mode="append")
    assert [v["version"] for v in pylance.dataset(a).versions()] == [8, 9]


@pytest.mark.parametrize("lib", [ours, pylance], ids=["ours", "pylance"])
def test_auto_cleanup_stops_at_tagged_versions(tmp_path, lib):
    a = str(tmp_path / "ds")
    lib.write_dataset(_table(3), a, auto_cleanup_options={"interval": 2, "older_than_seconds": 0})
    lib.write_dataset(_table(3), a, mode="append")
    lib.dataset(a).tags.create("keep", 1)
    lib.write_dataset(_table(3), a, mode="append")
    lib.write_dataset(_table(3), a, mode="append")  # version 4 is due; tagged version 1 stops it (Lance's policy)
    assert [v["version"] for v in pylance.dataset(a).versions()] == [1, 2, 3, 4]


def test_bad_auto_cleanup_options_write_nothing(tmp_path):
    a = str(tmp_path / "ours")
    for bad in ({"interval": 1}, {"interval": -1, "older_than_seconds": 0}, {"interval": "1", "older_than_seconds": 0}):
        with pytest.raises(ours.InvalidInputError, match="auto_cleanup_options"):
            ours.write_dataset(_table(1), a, auto_cleanup_options=bad)
    assert not os.path.exists(a)


# -- item 4: fragments ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", STORAGE_VERSIONS)
def test_fragment_create_as_pylance(tmp_path, version):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    fa = ours.LanceFragment.create(a, _table(700), data_storage_version=version)
    fb = pylance.LanceFragment.create(b, _table(700), data_storage_version=version)
    assert not os.path.exists(os.path.join(a, "_versions"))  # nothing committed
    assert (fa.id, fa.physical_rows, len(fa.files)) == (fb.id, fb.physical_rows, len(fb.files)) == (0, 700, 1)
    ours.LanceDataset.commit(a, ours.LanceOperation.Overwrite(_table(10).schema, [fa]))
    pylance.LanceDataset.commit(b, pylance.LanceOperation.Overwrite(  # pylance wants its LanceSchema here
        pylance.schema.LanceSchema.from_pyarrow(_table(10).schema), [fb]))
    fa2 = ours.LanceFragment.create(a, _table(5, 700), fragment_id=9, data_storage_version=version)
    fb2 = pylance.LanceFragment.create(b, _table(5, 700), fragment_id=9, data_storage_version=version)
    assert fa2.id == fb2.id == 9
    ours.LanceDataset.commit(a, ours.LanceOperation.Append([fa2]), 1)
    pylance.LanceDataset.commit(b, pylance.LanceOperation.Append([fb2]), read_version=1)
    _same_dataset(a, b)
    assert [f.fragment_id for f in pylance.dataset(a).get_fragments()] == \
        [f.fragment_id for f in pylance.dataset(b).get_fragments()]
    # a pylance fragment committed by us, our fragment committed by pylance
    mixed = str(tmp_path / "mixed")
    ours.write_dataset(_table(5), mixed, data_storage_version=version)
    theirs_frag = pylance.LanceFragment.create(mixed, _table(5, 5), data_storage_version=version)
    ours.LanceDataset.commit(mixed, ours.LanceOperation.Append(
        [ours.FragmentMetadata.from_json(theirs_frag.to_json())]), 1)
    our_frag = ours.LanceFragment.create(mixed, _table(5, 10))
    pylance.LanceDataset.commit(mixed, pylance.LanceOperation.Append(
        [pylance.FragmentMetadata.from_json(json.dumps(our_frag.to_json()))]), read_version=2)
    assert pylance.dataset(mixed).to_table().equals(pa.concat_tables([_table(5), _table(5, 5), _table(5, 10)]))


def test_fragment_create_bad_input_writes_nothing(tmp_path):
    a = str(tmp_path / "ours")
    ours.write_dataset(_table(3), a)
    before = _listing(a)
    with pytest.raises(ours.SchemaMismatchError):
        ours.LanceFragment.create(a, pa.table({"id": ["x"]}))
    with pytest.raises(TypeError):
        ours.LanceFragment.create(a, _table(3), fragment_id="1")
    assert _listing(a) == before


@pytest.mark.parametrize("version", STORAGE_VERSIONS)
def test_fragment_reads_and_delete_as_pylance(tmp_path, version):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(3000), a, max_rows_per_file=1000, data_storage_version=version)
    pylance.dataset(a).delete("id % 10 = 3")
    shutil.copytree(a, b)
    ofrag, pfrag = ours.dataset(a).get_fragment(1), pylance.dataset(b).get_fragment(1)
    assert ofrag.num_deletions == pfrag.num_deletions == 100
    assert ofrag.metadata.physical_rows == pfrag.metadata.physical_rows
    for flt in ("score > 0", "text IS NULL", "id < 1500 AND s.x > 1200"):
        assert ofrag.count_rows(flt) == pfrag.count_rows(flt)
    for kwargs in ({"offset": 10, "limit": 25}, {"limit": 7}, {"offset": 880}, {"filter": "score > 0", "limit": 5,
                                                                                 "offset": 3}):
        assert ofrag.to_table(**kwargs).equals(pfrag.to_table(**kwargs))
    new_a, new_b = ofrag.delete("score > 0.5"), pfrag.delete("score > 0.5")
    assert new_a.num_deletions == new_b.num_deletions and new_a.id == new_b.id == 1
    ours.LanceDataset.commit(a, ours.LanceOperation.Delete([new_a], [], "score > 0.5"), 2)
    pylance.LanceDataset.commit(b, pylance.LanceOperation.Delete([new_b], [], "score > 0.5"), read_version=2)
    _same_dataset(a, b)
    assert ours.dataset(a).get_fragment(0).delete("id >= 0") is None
    assert pylance.dataset(b).get_fragment(0).delete("id >= 0") is None
    unchanged = ours.dataset(a).get_fragment(2)
    assert unchanged.delete("id < 0") == unchanged.metadata
    before = _listing(a)
    with pytest.raises(ours.LanceError):
        unchanged.delete("nope > 1")
    with pytest.raises(ours.InvalidInputError):
        unchanged.to_table(limit=-1)
    assert _listing(a) == before


# -- item 5: metadata ----------------------------------------------------------------------------

def _ops(handle):
    """The same metadata operations, in pylance's and our spelling (identical)."""
    out = [
        handle.update_metadata({"owner": "ml", "stage": "raw"}),
        handle.update_config({"lance.custom": "1", "other": "x"}),
        handle.update_schema_metadata({"desc": "readings"}),
        handle.update_field_metadata({"id": {"unit": "none"}, "s.y": {"note": "nested"}}),
        handle.delete_config_keys(["other", "absent"]),
        handle.update_metadata({"stage": None, "new": "v"}),
        handle.update_config({"only": "this"}, replace=True),
        handle.update_schema_metadata({"k": "v"}, replace=True),
        handle.update_field_metadata({"id": {"unit2": "x"}}, replace=True),
        handle.update_metadata({}),
    ]
    return out


@pytest.mark.parametrize("version", STORAGE_VERSIONS)
def test_metadata_ops_as_pylance(tmp_path, version):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(500), a, data_storage_version=version, enable_stable_row_ids=True)
    pylance.dataset(a).delete("id < 10")
    shutil.copytree(a, b)
    handle_a, handle_b = ours.dataset(a), pylance.dataset(b)
    assert _ops(handle_a) == _ops(handle_b)  # returned values
    assert handle_a.version == handle_b.version == 12  # handles advance
    _same_dataset(a, b)
    assert pylance.dataset(a).schema_metadata == pylance.dataset(b).schema_metadata == {"k": "v"}
    assert pylance.dataset(a).lance_schema == pylance.dataset(b).lance_schema  # field metadata
    # pylance reads our transactions as its own
    ta, tb = pylance.dataset(a).get_transactions(20), pylance.dataset(b).get_transactions(20)
    assert [t.operation for t in ta] == [t.operation for t in tb] and len(ta) == 12
    # we read pylance's
    oa, ob = ours.dataset(a).get_transactions(20), ours.dataset(b).get_transactions(20)
    assert [t.operation for t in oa] == [t.operation for t in ob]
    assert [t.read_version for t in oa] == [t.read_version for t in tb]
    assert ours.dataset(a).config() == pylance.dataset(b).config() == {"only": "this"}
    assert ours.dataset(b).metadata == pylance.dataset(a).metadata
    assert ours.dataset(b).schema_metadata == pylance.dataset(a).schema_metadata
    # and the data is untouched
    assert pylance.dataset(a).to_table(with_row_id=True).equals(pylance.dataset(b).to_table(with_row_id=True))


@pytest.mark.parametrize("n", [0, 1, 3, 50])
def test_get_transactions_as_pylance(tmp_path, n):
    a = str(tmp_path / "ours")
    ours.write_dataset(_table(3), a)
    for i in range(4):
        pylance.write_dataset(_table(3, i), a, mode="append", commit_message=f"m{i}")
    pylance.dataset(a).cleanup_old_versions(older_than=dt.timedelta(0))  # keeps only the latest
    ours.write_dataset(_table(3), a, mode="append")
    mine, theirs = ours.dataset(a).get_transactions(n), pylance.dataset(a).get_transactions(n)
    assert [(t.read_version, t.uuid, t.transaction_properties) for t in mine] == \
        [(t.read_version, t.uuid, t.transaction_properties) for t in theirs]
    old_o, old_p = ours.dataset(a).checkout_version(5), pylance.dataset(a, version=5)
    assert [t.uuid for t in old_o.get_transactions(n)] == [t.uuid for t in old_p.get_transactions(n)]


def test_dataset_stats_as_pylance(tmp_path):
    a = str(tmp_path / "ours")
    ours.write_dataset(_table(3000), a, max_rows_per_file=1000)
    ours.write_dataset(_table(10), a, mode="append")
    pylance.dataset(a).delete("id % 3 = 0")
    ours.dataset(a).delete("id < 5")
    for rows in (1024, 1000, 1001, 5):
        assert ours.dataset(a).stats.dataset_stats(rows) == pylance.dataset(a).stats.dataset_stats(rows)
    assert ours.dataset(a).stats.dataset_stats() == pylance.dataset(a).stats.dataset_stats()


def test_tags_list_ordered_as_pylance(tmp_path):
    a = str(tmp_path / "ours")
    ours.write_dataset(_table(3), a)
    for _ in range(3):
        ours.write_dataset(_table(3), a, mode="append")
    ours.dataset(a).tags.create("b", 2)
    pylance.dataset(a).tags.create("a", 2)
    ours.dataset(a).tags.create("z", 4)
    pylance.dataset(a).tags.create("c", 1)
    for order in (None, "asc", "desc"):
        assert ours.dataset(a).tags.list_ordered(order) == pylance.dataset(a).tags.list_ordered(order)
    with pytest.raises(ValueError, match="order"):
        ours.dataset(a).tags.list_ordered("up")


def test_lance_schema_pyarrow_names(tmp_path):
    schema = _table(10).schema.with_metadata({"k": "v"})
    mine = ours.LanceSchema.from_pyarrow(schema)
    theirs = pylance.schema.LanceSchema.from_pyarrow(schema)
    assert mine.to_pyarrow().equals(theirs.to_pyarrow(), check_metadata=True)
    a = str(tmp_path / "ours")
    ours.write_dataset(_table(1), a)
    assert ours.dataset(a).lance_schema.to_pyarrow().equals(pylance.dataset(a).lance_schema.to_pyarrow())


def test_bad_metadata_ops_change_nothing(tmp_path):
    a = str(tmp_path / "ours")
    ours.write_dataset(_table(3), a)
    handle = ours.dataset(a)
    before = _listing(a)
    cases = [
        (lambda: handle.update_config({"k": 1}), TypeError),
        (lambda: handle.update_metadata({1: "x"}), TypeError),
        (lambda: handle.update_schema_metadata(["k"]), TypeError),
        (lambda: handle.update_field_metadata({"nope": {"f": "1"}}), OSError),
        (lambda: handle.update_field_metadata({"s.nope": {"f": "1"}}), OSError),
        (lambda: handle.update_field_metadata({"id": {"f": 1}}), TypeError),
        (lambda: handle.delete_config_keys("abc"), TypeError),
    ]
    for call, builtin in cases:
        with pytest.raises(builtin) as err:
            call()
        assert isinstance(err.value, ours.LanceError)
    # pylance raises the same builtins for the same calls
    theirs = pylance.dataset(a)
    for call in (lambda: theirs.update_config({"k": 1}), lambda: theirs.delete_config_keys("abc")):
        with pytest.raises(TypeError):
            call()
    with pytest.raises(OSError):
        theirs.update_field_metadata({"nope": {"f": "1"}})
    assert _listing(a) == before and handle.version == 1


# -- concurrency ---------------------------------------------------------------------------------

def _concurrent_history(uri: str) -> None:
    """Writes by both libraries after a handle was opened at version 1."""
    pylance.write_dataset(_table(200, 500), uri, mode="append")
    ours.dataset(uri).delete("id % 4 = 1")
    pylance.dataset(uri).delete("id < 20")
    ours.dataset(uri).optimize.compact_files()
    pylance.dataset(uri).optimize.compact_files()


@pytest.mark.parametrize("op", ["update_metadata", "update_config", "update_schema_metadata",
                                "update_field_metadata", "delete_config_keys"])
def test_metadata_ops_against_concurrent_writes(tmp_path, op):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(500), a, max_rows_per_file=100, enable_stable_row_ids=True)
    pylance.dataset(a).update_config({"gone": "1"})
    shutil.copytree(a, b)
    stale_a, stale_b = ours.dataset(a), pylance.dataset(b)
    _concurrent_history(a)
    _concurrent_history(b)
    args = {"update_field_metadata": ({"s.x": {"k": "v"}},), "delete_config_keys": (["gone"],)}.get(op, ({"k": "v"},))
    assert getattr(stale_a, op)(*args) == getattr(stale_b, op)(*args)
    assert stale_a.version == stale_b.version == pylance.dataset(a).version
    _same_dataset(a, b)  # nothing lost or resurrected
    rows = ["id", "_rowid"]
    assert pylance.dataset(a).to_table(columns=rows).equals(pylance.dataset(b).to_table(columns=rows))
    assert pylance.dataset(a).lance_schema == pylance.dataset(b).lance_schema


@pytest.mark.parametrize("first, second", [({"k": "1"}, {"k": "2"}), ({"k": "1"}, {"j": "2"})])
def test_concurrent_config_updates_as_pylance(tmp_path, first, second):
    a, b = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(5), a)
    shutil.copytree(a, b)
    stale_a, stale_b = ours.dataset(a), pylance.dataset(b)
    pylance.dataset(a).update_config(first)
    pylance.dataset(b).update_config(first)
    outcomes = []
    for stale in (stale_a, stale_b):
        try:
            stale.update_config(second)
            outcomes.append("ok")
        except (ours.CommitConflictError, OSError, ValueError, RuntimeError) as exc:
            outcomes.append("conflict")
            assert not isinstance(stale, ours.LanceDataset) or isinstance(exc, ours.LanceError)
    assert outcomes[0] == outcomes[1], outcomes
    assert ours.dataset(a).config() == pylance.dataset(b).config()
    assert pylance.dataset(a).version == pylance.dataset(b).version
