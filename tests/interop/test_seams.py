"""pylance's semantics at the seams, side by side: code written for pylance behaves the same
on our handles (handle state after a write, the builtin bases of errors, projections)."""

from __future__ import annotations

import os
import shutil

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as ours


def _table() -> pa.Table:
    return pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "name": ["a", "b", "c", "d"]})


@pytest.fixture
def twins(tmp_path):
    """The same dataset written twice, opened by pylance and by us."""
    theirs_uri, ours_uri = str(tmp_path / "theirs.lance"), str(tmp_path / "ours.lance")
    pylance.write_dataset(_table(), theirs_uri)
    pylance.write_dataset(_table(), ours_uri)
    return pylance.dataset(theirs_uri), ours.dataset(ours_uri)


def _raised(call):
    with pytest.raises(Exception) as info:
        call()
    return info.value


BUILTINS = (ValueError, OSError, FileNotFoundError, FileExistsError, LookupError, NotImplementedError)


@pytest.mark.parametrize("case", [
    "missing version", "missing tag", "missing dataset", "checkout missing version", "checkout missing tag",
    "append other columns", "append other types", "create existing", "unknown filter column",
    "unknown projection column", "duplicate tag", "delete missing tag", "tag missing version",
])
def test_errors_derive_from_the_builtin_pylance_raises(twins, tmp_path, case):
    theirs, mine = twins
    calls = {
        "missing version": lambda lib, ds: lib.dataset(ds.uri, version=99),
        "missing tag": lambda lib, ds: lib.dataset(ds.uri, version="nope"),
        "missing dataset": lambda lib, ds: lib.dataset(str(tmp_path / "nothing.lance")),
        "checkout missing version": lambda lib, ds: ds.checkout_version(99),
        "checkout missing tag": lambda lib, ds: ds.checkout_version("nope"),
        "append other columns": lambda lib, ds: lib.write_dataset(pa.table({"x": [1]}), ds.uri, mode="append"),
        "append other types": lambda lib, ds: lib.write_dataset(
            pa.table({"id": ["x"], "name": ["y"]}), ds.uri, mode="append"),
        "create existing": lambda lib, ds: lib.write_dataset(_table(), ds.uri, mode="create"),
        "unknown filter column": lambda lib, ds: ds.to_table(filter="nocol > 1"),
        "unknown projection column": lambda lib, ds: ds.to_table(columns=["nocol"]),
        "duplicate tag": lambda lib, ds: (ds.tags.create("t", 1), ds.tags.create("t", 1)),
        "delete missing tag": lambda lib, ds: ds.tags.delete("zz"),
        "tag missing version": lambda lib, ds: ds.tags.create("t2", 999),
    }
    theirs_error = _raised(lambda: calls[case](pylance, theirs))
    our_error = _raised(lambda: calls[case](ours, mine))
    assert isinstance(our_error, ours.LanceError), repr(our_error)
    expected = [base for base in BUILTINS if isinstance(theirs_error, base)]
    assert expected, repr(theirs_error)
    for base in expected:
        assert isinstance(our_error, base), f"{case}: pylance raised {base.__name__}, we raised {our_error!r}"


def test_a_handles_own_writes_move_it_to_the_committed_version(twins):
    theirs, mine = twins
    for ds in (theirs, mine):
        ds.delete("id = 1")
    assert mine.version == theirs.version == 2
    assert mine.count_rows() == theirs.count_rows() == 3
    old_theirs, old_mine = theirs.checkout_version(1), mine.checkout_version(1)
    assert old_mine.version == 1 and mine.version == 2  # checkout_version returns a new handle
    old_theirs.restore()
    old_mine.restore()
    assert old_mine.version == old_theirs.version == 3
    assert old_mine.count_rows() == old_theirs.count_rows() == 4
    pylance.write_dataset(_table(), theirs.uri, mode="append")
    ours.write_dataset(_table(), mine.uri, mode="append")
    theirs, mine = pylance.dataset(theirs.uri), ours.dataset(mine.uri)
    before = mine.version
    assert theirs.optimize.compact_files().fragments_removed == mine.optimize.compact_files().fragments_removed == 2
    # pylance 14 commits a ReserveFragments version first; ours commits one Rewrite: both handles move
    assert theirs.version == theirs.latest_version and mine.version == mine.latest_version == before + 1
    assert len(mine.get_fragments()) == len(theirs.get_fragments()) == 1


def test_a_delete_matching_nothing_commits_a_version_as_in_pylance(twins):
    theirs, mine = twins
    assert theirs.delete("id > 100")["num_deleted_rows"] == mine.delete("id > 100")["num_deleted_rows"] == 0
    assert theirs.version == mine.version == 2
    assert pylance.dataset(mine.uri).version == 2
    assert pylance.dataset(mine.uri).get_transactions(1)[0].operation == \
        pylance.dataset(theirs.uri).get_transactions(1)[0].operation
    assert ours.dataset(mine.uri).to_table().equals(_table())


def test_commit_restore_needs_no_read_version(twins):
    theirs, mine = twins
    theirs.delete("id = 1")
    mine.delete("id = 1")
    restored_theirs = pylance.LanceDataset.commit(theirs.uri, pylance.LanceOperation.Restore(1))
    restored_mine = ours.LanceDataset.commit(mine.uri, ours.LanceOperation.Restore(1))
    assert restored_mine.version == restored_theirs.version == 3
    assert pylance.dataset(mine.uri).to_table().equals(restored_theirs.to_table())


def test_batches_are_cast_to_the_given_schema_as_pylance_casts(tmp_path):
    schema = pa.schema([("a", pa.int64())])
    cases = {"widen": pa.array([1, 2], pa.int32()), "whole float": pa.array([1.0, 2.0]),
             "narrow": pa.array([1.5]), "text": pa.array(["x"])}
    for name, values in cases.items():
        def batches(values=values):
            yield pa.record_batch([values], names=["a"])
        results = []
        for lib in (pylance, ours):
            uri = str(tmp_path / f"{name}-{lib.__name__}.lance")
            try:
                results.append(lib.write_dataset(batches(), uri, schema=schema).to_table())
            except OSError as exc:  # pylance: OSError; ours: SchemaMismatchError, also an OSError
                results.append(type(exc))
                assert lib is pylance or isinstance(exc, ours.SchemaMismatchError)
                assert lib is pylance or not os.path.exists(os.path.join(uri, "_versions"))
        if isinstance(results[0], pa.Table):
            assert results[1].equals(results[0]), name
        else:
            assert not isinstance(results[1], pa.Table), name


def test_projection_with_sql_expressions(twins):
    theirs, mine = twins
    columns = {"double": "id * 2", "id": "id", "shout": "upper(name)"}
    try:
        expected = theirs.to_table(columns=columns, filter="id > 1")
    except Exception:  # noqa: BLE001 - pylance's SQL may lack a function: compare what it has
        columns.pop("shout")
        expected = theirs.to_table(columns=columns, filter="id > 1")
    assert mine.to_table(columns=columns, filter="id > 1").equals(expected)
    assert mine.to_table(columns={"x": "id + 1"}, filter="id > 100").schema == pa.schema([("x", pa.int64())])
    with pytest.raises(ours.InvalidInputError, match="nocol"):
        mine.to_table(columns={"x": "nocol + 1"})


def test_a_missing_data_file_is_a_typed_error_naming_it(tmp_path):
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(pa.table({"id": list(range(20))}), uri, max_rows_per_file=10)
    twin = str(tmp_path / "twin.lance")
    shutil.copytree(uri, twin)
    name = sorted(os.listdir(os.path.join(uri, "data")))[0]
    os.remove(os.path.join(uri, "data", name))
    os.remove(os.path.join(twin, "data", name))
    theirs_error = _raised(lambda: pylance.dataset(twin).to_table())
    with pytest.raises(ours.DataFileNotFoundError, match=name) as info:
        ours.dataset(uri).to_table()
    assert isinstance(info.value, type(theirs_error).__mro__[1]) or isinstance(info.value, ValueError)
    assert isinstance(theirs_error, ValueError) and isinstance(info.value, ValueError)
