"""Schema and data evolution, our code alone: the wire form of Merge/Project/DataReplacement,
their conflict rules, what the new files hold, and that failures leave nothing behind."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core import conflicts, evolution
from airflow_lance.core._proto import table_pb2, transaction_pb2
from airflow_lance.core.scan import read_fragment
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.transaction import LanceOperation, Transaction


def _dataset(uri: str, n: int = 9, rows_per_file: int = 3) -> lance.LanceDataset:
    return lance.write_dataset(pa.table({"a": np.arange(n), "b": [f"v{i}" for i in range(n)]}), uri,
                               max_rows_per_file=rows_per_file)


def _data_files(uri: str) -> list[str]:
    return sorted(os.listdir(os.path.join(uri, "data")))


@pytest.mark.parametrize(("operation", "raw"), [
    (LanceOperation.Merge([], LanceSchema.from_arrow(pa.schema([("a", pa.int64())])), True), b"\x20\x01"),
    (LanceOperation.Project(LanceSchema.from_arrow(pa.schema([("a", pa.int64())])), True), b"\x10\x01"),
])
def test_preserves_nullability_is_written_as_pylance_14_writes_it(operation, raw):
    txn = Transaction(1, operation)
    wire = txn.to_pb()
    body = getattr(wire, operation.name).SerializeToString()
    assert body.endswith(raw)
    parsed = Transaction.from_pb(transaction_pb2.Transaction.FromString(wire.SerializeToString()))
    assert parsed.operation.preserves_nullability is True
    unflagged = dataclasses.replace(operation, preserves_nullability=False)
    parsed = Transaction.from_pb(Transaction(1, unflagged).to_pb())
    assert parsed.operation.preserves_nullability is False


def test_data_replacement_round_trips():
    new_file = lance.DataFile("x.lance", (5,), (0,), 2, 2, 100)
    op = LanceOperation.DataReplacement([LanceOperation.DataReplacementGroup(3, new_file)])
    parsed = Transaction.from_pb(transaction_pb2.Transaction.FromString(Transaction(4, op).to_pb().SerializeToString()))
    assert parsed.operation == op
    assert parsed.kind == "data_replacement" and parsed.operation.touched_fragment_ids() == {3}


def _txn(op) -> Transaction:
    return Transaction(1, op)


SCHEMA = LanceSchema.from_arrow(pa.schema([("a", pa.int64())]))


@pytest.mark.parametrize(("preserves", "outcome"), [(True, conflicts.OK), (False, conflicts.RETRY)])
def test_append_against_a_committed_merge(preserves, outcome):
    mine = _txn(LanceOperation.Append([]))
    assert conflicts.check(mine, _txn(LanceOperation.Merge([], SCHEMA, preserves))) is outcome


@pytest.mark.parametrize("theirs", [LanceOperation.Append([]), LanceOperation.Delete([], [1], "a = 1"),
                                    LanceOperation.Merge([], SCHEMA, True)])
def test_merge_against_appends_deletes_merges_is_retryable(theirs):
    assert conflicts.check(_txn(LanceOperation.Merge([], SCHEMA, True)), _txn(theirs)) is conflicts.RETRY


def _replacement(fragment_id: int, fields: tuple[int, ...]):
    return LanceOperation.DataReplacement(
        [LanceOperation.DataReplacementGroup(fragment_id, lance.DataFile("f.lance", fields, (0,), 2, 2))])


def _fragment(fragment_id: int) -> lance.FragmentMetadata:
    return lance.FragmentMetadata(fragment_id, [lance.DataFile("d.lance", (0,), (0,), 2, 2)], physical_rows=2)


SIX_COLUMNS = LanceSchema.from_arrow(pa.schema([(f"c{i}", pa.int64()) for i in range(6)]))


def _index_on(field: int) -> table_pb2.IndexMetadata:
    return table_pb2.IndexMetadata(name=f"i{field}", fields=[field])


@pytest.mark.parametrize(("theirs", "outcome"), [
    (LanceOperation.Append([]), conflicts.OK),
    (LanceOperation.Delete([], [2], "a = 1"), conflicts.OK),
    (LanceOperation.Delete([_fragment(1)], [], "a = 1"), conflicts.OK),  # a deletion vector stays aligned
    (LanceOperation.Delete([], [1], "a = 1"), conflicts.INCOMPATIBLE),  # the target fragment is gone
    (LanceOperation.Update([1], [], [_fragment(7)]), conflicts.INCOMPATIBLE),
    (LanceOperation.Update([], [_fragment(1)], [_fragment(7)]), conflicts.RETRY),  # rows moved out
    (LanceOperation.Update([], [_fragment(2)], [_fragment(7)]), conflicts.OK),
    (LanceOperation.Update([], [_fragment(1)], [], fields_modified=[5], update_mode="rewrite_columns"),
     conflicts.RETRY),  # our file would undo their update
    (LanceOperation.Update([], [_fragment(1)], [], fields_modified=[6], update_mode="rewrite_columns"),
     conflicts.OK),
    (LanceOperation.Update([], [_fragment(2)], [], fields_modified=[5], update_mode="rewrite_columns"),
     conflicts.OK),
    (LanceOperation.Merge([], SCHEMA), conflicts.RETRY),
    (LanceOperation.Project(SCHEMA), conflicts.INCOMPATIBLE),  # field 5 dropped
    (LanceOperation.Project(SIX_COLUMNS), conflicts.OK),  # fields 0-5: field 5 kept
    (LanceOperation.CreateIndex([_index_on(5)]), conflicts.RETRY),
    (LanceOperation.CreateIndex([_index_on(6)]), conflicts.OK),
    (_replacement(1, (5,)), conflicts.RETRY),
    (_replacement(1, (6,)), conflicts.OK),
    (_replacement(2, (5,)), conflicts.OK),
    (LanceOperation.Overwrite(SCHEMA, []), conflicts.INCOMPATIBLE),
    (LanceOperation.Restore(1), conflicts.INCOMPATIBLE),
])
def test_data_replacement_conflicts_as_lance(theirs, outcome):
    """pylance 14's rules (tests/interop/test_evolution_interop.py checks them against pylance)."""
    assert conflicts.check(_txn(_replacement(1, (5,))), _txn(theirs)) is outcome


def test_new_files_cover_physical_rows_with_nulls_at_deleted_rows(uri):
    ds = _dataset(uri)
    ds.delete("a = 1 OR a = 4")
    seen = []

    def udf(batch):
        seen.append(batch.column("a").to_pylist())
        return pa.record_batch([pa.array(np.asarray(batch.column("a")) * 2)], names=["c"])

    ds.add_columns(udf, read_columns=["a"])
    assert [0, 2] in seen and [3, 5] in seen  # the UDF sees live rows only, as pylance's
    fragment = ds.get_fragments()[0].metadata
    assert fragment.physical_rows == 3 and len(fragment.files) == 2
    stored = read_fragment(ds.store, fragment, ds.lance_schema.project(["c"]), with_deletions=False)
    assert stored.column("c").to_pylist() == [0, None, 4]
    assert ds.to_table().column("c").to_pylist() == [0, 4, 6, 10, 12, 14, 16]


def test_handle_moves_and_history_records_each_operation(uri):
    ds = _dataset(uri)
    other = lance.dataset(uri)
    ds.add_columns({"c": "a + 1"})
    ds.add_columns(pa.field("n", pa.float32()))
    ds.alter_columns({"path": "c", "name": "c1"})
    ds.drop_columns(["b"])
    ds.merge(pa.table({"a": [2], "m": ["two"]}), "a")
    assert ds.version == 6 and other.version == 1
    kinds = [ds.read_transaction(v).kind for v in range(2, 7)]
    assert kinds == ["merge", "merge", "project", "project", "merge"]
    assert ds.schema.names == ["a", "c1", "n", "m"]


def test_a_failing_udf_leaves_no_files_and_no_version(uri):
    ds = _dataset(uri)
    before = _data_files(uri)
    calls = []

    def udf(batch):
        calls.append(1)
        if len(calls) == 3:  # the third fragment
            raise RuntimeError("boom")
        return pa.record_batch([batch.column("a")], names=["c"])

    with pytest.raises(RuntimeError):
        ds.add_columns(evolution.batch_udf(pa.schema([("c", pa.int64())]))(udf), read_columns=["a"])
    assert _data_files(uri) == before and lance.dataset(uri).version == 1 == ds.version


def test_merge_columns_refuses_a_checkpoint(uri, tmp_path):
    ds = _dataset(uri)
    udf = evolution.batch_udf(pa.schema([("c", pa.int64())]), checkpoint_file=tmp_path / "c.db")(lambda b: b)
    with pytest.raises(lance.SchemaEvolutionError):
        ds.get_fragments()[0].merge_columns(udf, ["a"])


def test_non_nullable_refused_when_nulls_exist(uri):
    lance.write_dataset(pa.table({"a": [1, None, 3]}), uri)
    ds = lance.dataset(uri)
    with pytest.raises(lance.SchemaEvolutionError, match="null"):
        ds.alter_columns({"path": "a", "nullable": False})
    assert ds.version == 1


def test_lossy_cast_is_refused_before_commit(uri):
    lance.write_dataset(pa.table({"a": [1, 300]}), uri)
    ds = lance.dataset(uri)
    before = _data_files(uri)
    with pytest.raises(lance.SchemaEvolutionError):
        ds.alter_columns({"path": "a", "data_type": pa.int8()})
    assert ds.version == 1 and _data_files(uri) == before


def test_data_replacement_that_matches_no_file_is_refused(uri):
    ds = _dataset(uri)
    bad = LanceOperation.DataReplacement(
        [LanceOperation.DataReplacementGroup(0, lance.DataFile("x.lance", (0, 5), (0, 1), 2, 2))])
    with pytest.raises(lance.InvalidInputError):
        lance.LanceDataset.commit(uri, bad, read_version=ds.version)
    assert lance.dataset(uri).version == 1


@pytest.mark.parametrize(("preserves", "outcome"), [(True, conflicts.OK), (False, conflicts.RETRY)])
def test_project_and_append_both_ways(preserves, outcome):
    project = _txn(LanceOperation.Project(SCHEMA, preserves))
    append = _txn(LanceOperation.Append([]))
    assert conflicts.check(project, append) is outcome
    assert conflicts.check(append, project) is outcome
    assert conflicts.check(project, _txn(LanceOperation.Delete([], [1], "a = 1"))) is conflicts.OK
