"""batch_udf checkpoints in pylance's format: a run of add_columns that fails part way leaves
its finished fragments and batches in the SQLite checkpoint; the next run, ours or pylance's,
calls the UDF only for what is missing, and the result equals pylance's uninterrupted run."""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3

import lance as pylance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as ours
from airflow_lance.core.errors import SchemaEvolutionError

LIBS = {"ours": ours, "pylance": pylance}
SCHEMA = pa.schema([("u", pa.int64())])


def _dataset(uri: str, stable: bool) -> None:
    pylance.write_dataset(pa.table({"id": pa.array(range(30), pa.int64())}), uri, max_rows_per_file=10,
                          enable_stable_row_ids=stable)
    if stable:
        pylance.dataset(uri).delete("id = 3 OR id = 15")


def _udf(lib, checkpoint: str, calls: list, fail_from: int | None):
    @lib.batch_udf(output_schema=SCHEMA, checkpoint_file=checkpoint)
    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        first = batch["id"][0].as_py()
        calls.append(first)
        if fail_from is not None and first >= fail_from:
            raise RuntimeError("interrupted")
        return pa.record_batch([pc.multiply(batch["id"], 2)], names=["u"])

    return double


@pytest.mark.parametrize("stable", [False, True], ids=["plain", "stable-ids+deletions"])
@pytest.mark.parametrize("first,second", [("ours", "pylance"), ("pylance", "ours"), ("ours", "ours")])
def test_a_run_resumes_from_the_other_ones_checkpoint(tmp_path, first, second, stable):
    uri, oracle = str(tmp_path / "ds.lance"), str(tmp_path / "oracle.lance")
    checkpoint = str(tmp_path / "checkpoint.sqlite")
    _dataset(uri, stable)
    shutil.copytree(uri, oracle)
    calls: list[int] = []
    with pytest.raises(Exception, match="interrupted"):
        LIBS[first].dataset(uri).add_columns(_udf(LIBS[first], checkpoint, calls, 24), read_columns=["id"],
                                             batch_size=4)
    assert pylance.dataset(uri).version == pylance.dataset(oracle).version  # nothing committed
    with sqlite3.connect(checkpoint) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT fragment_id FROM fragments")) == [0, 1]
        assert list(conn.execute("SELECT fragment_id, batch_index FROM batches")) == [(2, 0)]
    calls.clear()
    LIBS[second].dataset(uri).add_columns(_udf(LIBS[second], checkpoint, calls, None), read_columns=["id"],
                                          batch_size=4)
    assert calls == [24, 28]  # fragments 0 and 1 and batch 0 of fragment 2 came from the checkpoint
    assert not os.path.exists(checkpoint)
    pylance.dataset(oracle).add_columns(_udf(pylance, str(tmp_path / "oracle.sqlite"), [], None),
                                        read_columns=["id"], batch_size=4)
    for reader in (pylance, ours):
        mine = reader.dataset(uri).to_table(with_row_id=True).sort_by("_rowid")
        theirs = reader.dataset(oracle).to_table(with_row_id=True).sort_by("_rowid")
        if not stable:
            mine, theirs = mine.drop_columns(["_rowid"]), theirs.drop_columns(["_rowid"])
        assert mine.equals(theirs)
    assert len(os.listdir(os.path.join(uri, "data"))) == len(os.listdir(os.path.join(oracle, "data")))


def test_a_checkpoint_holding_anything_but_arrow_is_refused(tmp_path):
    uri = str(tmp_path / "ds.lance")
    checkpoint = str(tmp_path / "checkpoint.sqlite")
    _dataset(uri, False)
    ours.batch_udf(output_schema=SCHEMA, checkpoint_file=checkpoint)(lambda b: b)  # creates the tables
    with sqlite3.connect(checkpoint) as conn:
        conn.execute("INSERT INTO batches VALUES (0, 0, ?)", (pickle.dumps(os.getcwd.__call__),))
    calls: list[int] = []
    before = sorted(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(SchemaEvolutionError, match="pyarrow objects"):
        ours.dataset(uri).add_columns(_udf(ours, checkpoint, calls, None), read_columns=["id"], batch_size=4)
    assert ours.dataset(uri).version == 1
    assert sorted(os.listdir(os.path.join(uri, "data"))) == before
