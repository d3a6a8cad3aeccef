"""The Spark operators through Spark Connect (a ``spark_connect`` connection,
``sc://localhost:<port>`` with the token as its password) against a real Connect server that
requires the token (tests/airflow/spark_connect_server.py, one per module) through ``dag.test()``,
pylance as the oracle.

``make test`` runs the short DAG: a create and an upsert (merge insert) commit exactly pylance's
rows, a job failing on the server commits nothing, the token never reaches the task logs, XCom,
the client's command line or environment. ``make stress`` runs the full DAG (create, append,
Spark compaction, merge inserts of both plans and a failing one, add columns by expressions and
by a function and a failing one, Spark update and delete and a failing update, a Kartothek import,
a wrong token) and kills a running Connect job."""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import shutil
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, task_logs_to, xcom_value
from spark_connect_server import ConnectServer, spark_connect_server

from airflow_lance.operators._spark_connect import SparkConnectJobRunner
from airflow_lance.operators._spark_submit import LanceSparkJobError
from airflow_lance.operators.spark_write import LanceSparkWriteOperator

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))

import spark_udfs  # noqa: E402
from kartothek_fixtures import as_expected, ground_truth  # noqa: E402

TOKEN = "c0nnect-t0ken-never-logged-7f3a9e"
WRONG_TOKEN = "wr0ng-t0ken-never-logged-41bd"
COUNTS = ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")
DAGS = "lance_test_spark_connect.py"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with spark_connect_server(tmp_path_factory.mktemp("spark-connect"), token=TOKEN) as running:
        yield running


@dataclasses.dataclass
class ConnectRun:
    root: pathlib.Path
    dag_run: Any
    log: str

    @property
    def states(self) -> dict[str, str]:
        return {task_id: ti.state for task_id, ti in task_instances(self.dag_run).items()}

    def oracle(self, name: str) -> pylance.LanceDataset:
        return pylance.dataset(str(self.root / "oracle" / f"{name}.lance"))

    def ours(self, name: str) -> pylance.LanceDataset:
        return pylance.dataset(str(self.root / f"{name}.lance"))


def _run(server: ConnectServer, root: pathlib.Path, dag_id: str, data: pathlib.Path,
         prepare: Callable[[pathlib.Path], None] | None = None) -> ConnectRun:
    data.mkdir(parents=True, exist_ok=True)
    if prepare is not None:
        prepare(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CONNECT_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        mp.setenv(*connection_env("spark_connect_test", conn_type="spark_connect", host="sc://localhost",
                                  port=server.port, password=TOKEN))
        mp.setenv(*connection_env("spark_connect_wrong_token", conn_type="spark_connect", host="sc://localhost",
                                  port=server.port, password=WRONG_TOKEN))
        # pyspark's fallback token in the worker's environment: the client must not inherit it
        mp.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", TOKEN)
        handler = logging.FileHandler(root / "airflow-lance.log")
        logging.getLogger("airflow_lance").addHandler(handler)
        try:
            with task_logs_to(root / "task.log"):
                dag_run = load_dag(DAGS, dag_id).test()
        finally:
            logging.getLogger("airflow_lance").removeHandler(handler)
            handler.close()
    return ConnectRun(data, dag_run, (root / "task.log").read_text() + (root / "airflow-lance.log").read_text())


def _rows(start: int, stop: int, prefix: str = "row-", factor: float = 0.5) -> pa.Table:
    ids = pa.array(range(start, stop), pa.int64())
    return pa.table({"id": ids, "x": pc.multiply(ids.cast(pa.float64()), factor),
                     "name": pa.array([f"{prefix}{i}" for i in range(start, stop)])})


def _with_oracle(root: pathlib.Path, name: str, table: pa.Table, delete: str | None = None,
                 **options: Any) -> None:
    """``<name>.lance`` written by pylance (and ``oracle/<name>.lance``, the same files)."""
    ds = pylance.write_dataset(table, str(root / "oracle" / f"{name}.lance"), **options)
    if delete:
        ds.delete(delete)
    shutil.copytree(root / "oracle" / f"{name}.lance", root / f"{name}.lance")


def _prepare_full(root: pathlib.Path) -> None:
    _with_oracle(root, "merged", _rows(0, 2000), "id % 10 = 3", max_rows_per_file=500, enable_stable_row_ids=True)
    _with_oracle(root, "merge_fails", _rows(0, 100))
    _with_oracle(root, "columns", _rows(0, 1200).select(["id", "name"]), "id IN (5, 500)", max_rows_per_file=400)
    _with_oracle(root, "add_fails", _rows(0, 600).select(["id", "name"]), max_rows_per_file=300)
    _with_oracle(root, "dml", _rows(0, 1000), "id IN (3, 400, 999)", max_rows_per_file=300,
                 enable_stable_row_ids=True)
    vectors = np.random.default_rng(0).normal(size=(1200, 8)).astype(np.float32)
    _with_oracle(root, "indexed", _rows(0, 1200).append_column(
        "vec", pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), 8)), "id % 7 = 2",
        max_rows_per_file=400, enable_stable_row_ids=True)


@pytest.fixture(scope="module")
def run(server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> ConnectRun:
    """The full DAG (make stress)."""
    root = tmp_path_factory.mktemp("connect-data")
    return _run(server, root, "lance_test_spark_connect", root, _prepare_full)


@pytest.fixture(scope="module")
def short_run(server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> ConnectRun:
    """The short DAG (default suite): the create, the upsert and the failing write."""
    root = tmp_path_factory.mktemp("connect-short")
    return _run(server, root, "lance_test_spark_connect_short", root / "short")


def _sorted(ds: pylance.LanceDataset) -> dict[str, list[Any]]:
    """The rows sorted by every column (a key may repeat)."""
    table = ds.to_table()
    return table.sort_by([(name, "ascending") for name in table.column_names]).to_pydict()


def _source(table: pa.Table, ds: pylance.LanceDataset) -> pa.Table:
    return table.cast(pa.schema([ds.schema.field(n) for n in table.column_names]))


def _check_upsert(run: ConnectRun) -> None:
    """The short DAG's create + upsert equal pylance's merge insert of the same rows."""
    ours = pylance.dataset(str(run.root / "written.lance"))
    assert ours.version == 2
    oracle = pylance.write_dataset(_rows(0, 1000), str(run.root / "oracle" / "written.lance"))
    expected = oracle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _source(_rows(900, 1100, "new-", 2.0), oracle))
    result = xcom_value(run.dag_run, "upsert")
    assert {k: result[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    assert (result["num_inserted_rows"], result["num_updated_rows"]) == (100, 100)
    assert _sorted(ours) == _sorted(pylance.dataset(oracle.uri))
    assert _sorted(pylance.dataset(str(run.root / "written.lance"), version=1)) == _rows(0, 1000).to_pydict()


def _check_token_kept_secret(run: ConnectRun) -> None:
    """The token (and the wrong one) never in the task logs, XCom, the client's command line or
    environment; the client ran with the connection's token only."""
    for token in (TOKEN, WRONG_TOKEN):
        assert token not in run.log
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        values = [str(row.value) for row in session.scalars(select(XComModel).where(
            XComModel.run_id == run.dag_run.run_id, XComModel.dag_id == run.dag_run.dag_id))]
    assert values and not any(TOKEN in v or WRONG_TOKEN in v for v in values)
    records = sorted(run.root.parent.glob("client-*.json")) + sorted(run.root.glob("client-*.json"))
    assert records, "the recording source did not run in the client"
    for record in records:
        text = record.read_text()
        assert TOKEN not in text and WRONG_TOKEN not in text
        client = json.loads(text)
        assert "SPARK_CONNECT_AUTHENTICATE_TOKEN" not in client["environ"]
        assert not [name for name in client["environ"] if name.startswith("AIRFLOW_CONN_")]
        assert "--connect" in client["cmdline"]  # the Connect client itself


def _assert_nothing_committed(run: ConnectRun) -> None:
    failed = run.root / "failed.lance"
    # the source's partition 1 failed after its rows went to the writer: other files may exist, no version does
    assert not (failed / "_versions").exists() or not any((failed / "_versions").iterdir())
    with pytest.raises(ValueError):
        pylance.dataset(str(failed))
    assert "injected failure of the first attempt of partition 1" in run.log
    assert "nothing was committed" in run.log
    # the source module came to the server's Python workers as an artifact (py_files)
    assert "cluster_sources.py" in run.log


def test_short_create_and_upsert_commit_exactly_pylances_rows_a_failing_job_nothing(short_run: ConnectRun) -> None:
    assert short_run.states == {"create": "success", "upsert": "success", "failing": "failed"}, \
        short_run.log[-5000:]
    _check_upsert(short_run)
    assert "as a Spark Connect client of connection 'spark_connect_test'" in short_run.log
    _assert_nothing_committed(short_run)


def test_short_token_connection_keeps_the_token_secret(short_run: ConnectRun) -> None:
    assert short_run.states["create"] == "success"  # the server requires the token: it was sent
    _check_token_kept_secret(short_run)


@pytest.mark.slow  # make stress: the full DAG (the short version above runs in make test)
def test_create_append_and_compaction_commit_exactly_the_rows(run: ConnectRun) -> None:
    states = run.states
    assert {k: states[k] for k in ("create", "append", "compact", "failing")} == {
        "create": "success", "append": "success", "compact": "success", "failing": "failed"}, run.log[-5000:]
    ds = pylance.dataset(str(run.root / "written.lance"))
    assert ds.version == 3  # create, append, compaction: one version each
    table = ds.to_table().sort_by("id")
    assert table.to_pydict() == _rows(0, 1600).to_pydict()
    assert len(ds.get_fragments()) == 2  # 20 files (12 + 8) compacted to 2 of 800 rows
    assert xcom_value(run.dag_run, "create")["num_rows"] == 1000
    assert xcom_value(run.dag_run, "append")["num_rows"] == 600
    assert pylance.dataset(str(run.root / "written.lance"), version=2).count_rows() == 1600
    # the job ran as a Connect client, its tasks on the server's Python workers
    assert run.log.count("Spark Connect session") >= 3
    assert "as a Spark Connect client of connection 'spark_connect_test'" in run.log


@pytest.mark.slow  # make stress (with the full DAG)
def test_a_job_failing_on_the_server_commits_nothing(run: ConnectRun) -> None:
    _assert_nothing_committed(run)


@pytest.mark.slow  # make stress
def test_merge_inserts_equal_pylances_and_a_failing_one_commits_nothing(run: ConnectRun) -> None:
    states = run.states
    assert (states["merge_upsert"], states["merge_conditional"], states["merge_fails"]) == (
        "success", "success", "failed"), run.log[-5000:]
    oracle = run.oracle("merged")
    duplicates = pa.table({"id": pa.array([2600, 2600], pa.int64()), "x": [1.0, 2.0], "name": ["dup-2600"] * 2})
    upserted = oracle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _source(pa.concat_tables([_rows(1500, 2500, "new-", 2.0), duplicates]), oracle))
    oracle = run.oracle("merged")
    ids = pa.array(range(0, 3000, 7), pa.int64())
    partial = pa.table({"id": ids, "x": pc.multiply(ids.cast(pa.float64()), 3.0)})
    conditional = (oracle.merge_insert("id").when_matched_update_all("source.x > target.x + 100")
                   .when_not_matched_insert_all().when_not_matched_by_source_delete("id >= 2400")
                   .execute(_source(partial, oracle)))
    for task_id, expected in (("merge_upsert", upserted), ("merge_conditional", conditional)):
        result = xcom_value(run.dag_run, task_id)
        assert {k: result[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}, task_id
    assert all(xcom_value(run.dag_run, "merge_conditional")[k] > 0 for k in COUNTS)
    ours = run.ours("merged")
    assert ours.version == run.oracle("merged").version == 4  # written, a deletion, two merges
    assert _sorted(ours) == _sorted(run.oracle("merged"))
    # rows that were there before and were not rewritten keep their stable row ids, as in pylance
    def row_ids(ds: pylance.LanceDataset) -> dict[int, int]:
        table = ds.to_table(columns=["id"], with_row_id=True, filter="id < 2000")
        return dict(zip(table.column("id").to_pylist(), table.column("_rowid").to_pylist(), strict=True))
    # (the new row ids of the conditional merge's rewritten and inserted rows are numbered in write
    # order, in pylance too: the same set of ids, not necessarily the same assignment)
    ours_ids, theirs_ids = row_ids(ours), row_ids(run.oracle("merged"))
    assert ours_ids.keys() == theirs_ids.keys()
    assert ({*ours.to_table(columns=["id"], with_row_id=True).column("_rowid").to_pylist()}
            == {*run.oracle("merged").to_table(columns=["id"], with_row_id=True).column("_rowid").to_pylist()})
    kept = {k for k, v in theirs_ids.items() if v == k}  # written with ids 0..1999 by pylance, never rewritten
    assert len(kept) > 1000 and {k: ours_ids[k] for k in kept} == {k: theirs_ids[k] for k in kept}
    # the failing job (its source's partition 1 fails on the server) committed nothing
    assert run.ours("merge_fails").version == 1
    assert _sorted(run.ours("merge_fails")) == _sorted(run.oracle("merge_fails"))


@pytest.mark.slow  # make stress
def test_add_columns_equal_pylances_and_a_failing_function_commits_nothing(run: ConnectRun) -> None:
    states = run.states
    assert (states["add_sql"], states["add_function"], states["add_fails"]) == ("success", "success", "failed"), \
        run.log[-5000:]
    oracle = run.oracle("columns")
    oracle.add_columns({"doubled": "id * 2", "shout": "upper(name)"})
    pylance.dataset(oracle.uri).add_columns(spark_udfs.score, read_columns=["id"])
    ours, theirs = run.ours("columns"), run.oracle("columns")
    assert ours.version == theirs.version == 4  # written, a deletion, two add-columns
    assert ours.schema.names == theirs.schema.names == ["id", "name", "doubled", "shout", "score"]
    assert _sorted(ours) == _sorted(theirs)
    assert run.ours("add_fails").version == 1
    assert run.ours("add_fails").schema.names == ["id", "name"]
    assert "injected failure of the add-columns function" in run.log


@pytest.mark.slow  # make stress
def test_spark_update_and_delete_equal_pylances_and_a_failing_update_commits_nothing(run: ConnectRun) -> None:
    states = run.states
    assert (states["update"], states["delete"], states["update_fails"]) == ("success", "success", "failed"), \
        run.log[-5000:]
    oracle = run.oracle("dml")
    updated = oracle.update({"x": "x * 2 + 1", "name": "upper(name)"}, where="id % 3 = 0 OR id > 950")
    assert xcom_value(run.dag_run, "update")["num_rows_updated"] == updated["num_rows_updated"]
    before = pylance.dataset(oracle.uri).count_rows()
    pylance.dataset(oracle.uri).delete("id % 4 = 1 OR name = 'row-10'")
    assert xcom_value(run.dag_run, "delete")["num_deleted_rows"] == before - pylance.dataset(oracle.uri).count_rows()
    ours, theirs = run.ours("dml"), pylance.dataset(oracle.uri)
    assert ours.version == theirs.version == 4  # written, a deletion, update, delete: the failing update nothing
    contents = [ds.to_table(with_row_id=True).sort_by("id").to_pydict() for ds in (ours, theirs)]
    assert contents[0] == contents[1]


@pytest.mark.slow  # make stress
def test_indices_built_on_the_connect_server_are_used_by_pylance(run: ConnectRun) -> None:
    assert (run.states["index_btree"], run.states["index_vector"]) == ("success", "success"), run.log[-5000:]
    ds = run.ours("indexed")
    assert ds.version == 4
    assert {(i.name, i.index_type, i.num_rows_indexed) for i in ds.describe_indices()} == {
        ("x_idx", "BTree", ds.count_rows()), ("vec_idx", "IVF_FLAT", ds.count_rows())}
    for where in ("x < 100", "x = 250.5", "x >= 590"):
        assert ds.to_table(filter=where, columns=["id"]).sort_by("id") == ds.to_table(
            filter=where, columns=["id"], use_scalar_index=False).sort_by("id")
    table = ds.to_table(columns=["id", "vec"])
    for row in (0, 500, 1000):  # a stored vector's nearest neighbour through the index is itself
        found = ds.to_table(columns=["id"], nearest={"column": "vec", "q": table.column("vec")[row].values,
                                                     "k": 1, "nprobes": 4})
        assert found.column("id").to_pylist() == [table.column("id")[row].as_py()]


@pytest.mark.slow  # make stress
def test_kartothek_import_on_the_connect_server_equals_the_kartothek_data(run: ConnectRun) -> None:
    assert run.states["kartothek"] == "success", run.log[-5000:]
    ds = run.ours("two_keys")
    assert ds.version == 1
    assert all(f.count_rows() <= 1 for f in ds.get_fragments())  # max_rows_per_file=1
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(ground_truth("two_keys", "table"), ds.schema))


@pytest.mark.slow  # make stress
def test_a_wrong_token_fails_naming_authentication_and_no_token_leaks(run: ConnectRun) -> None:
    assert run.states["wrong_token"] == "failed"
    assert ("Spark Connect authentication failed: the server refused the connection's token "
            "(Invalid authentication token)") in run.log
    assert not (run.root / "wrong_token.lance").exists()
    _check_token_kept_secret(run)


def test_settings_a_connect_server_cannot_take_fail_before_anything_runs() -> None:
    with pytest.raises(LanceSparkJobError, match=r"takes none of executor_memory, packages.*nothing ran"):
        SparkConnectJobRunner({"conn_id": "spark_connect_test", "executor_memory": "1g", "packages": "x:y:1"})
    with pytest.raises(LanceSparkJobError, match="python_env_archive"):
        SparkConnectJobRunner({"conn_id": "spark_connect_test"}, python_env_archive="env.tar.gz")


@pytest.mark.slow  # make stress
def test_killing_a_running_connect_job_interrupts_it_on_the_server(server: ConnectServer, tmp_path: pathlib.Path) -> None:
    """on_kill while the job's tasks run on the server: the client interrupts its session's
    operations, the server has no running job of that session left, the tasks stop, nothing is
    committed."""
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri)
    operator = LanceSparkWriteOperator(
        task_id="killed", uri=uri, mode="append", source_callable="connect_sources:heartbeat_rows",
        py_files=str(TESTS / "connect_sources.py"), lance_conn_id=None, spark_conn_id="spark_connect_test")
    ti = types.SimpleNamespace(dag_id="kill_test", run_id="manual_1", task_id="killed", map_index=-1, try_number=1)
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    outcome: list[BaseException] = []

    def execute() -> None:
        try:
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    def session_jobs(session: str) -> list[dict]:
        return [job for job in server.running_jobs() if any(f"_Session_{session}_" in t for t in job["jobTags"])]

    beats = tmp_path / "beat"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CONNECT_TEST_ROOT", str(tmp_path))
        mp.setenv(*connection_env("spark_connect_test", conn_type="spark_connect", host="sc://localhost",
                                  port=server.port, password=TOKEN))
        logging.getLogger("airflow_lance").addHandler(handler)
        thread = threading.Thread(target=execute)
        try:
            thread.start()
            deadline = time.monotonic() + 180
            session = None
            while session is None or len(list(beats.glob("*"))) < 2 or not session_jobs(session):
                assert time.monotonic() < deadline and thread.is_alive(), "\n".join(lines[-50:])
                found = [line.split("Spark Connect session ")[1].strip() for line in lines
                         if "Spark Connect session " in line]
                session = found[0] if found else None
                time.sleep(0.2)
            operator.on_kill()
            thread.join(timeout=60)
        finally:
            logging.getLogger("airflow_lance").removeHandler(handler)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], LanceSparkJobError), outcome
    # the server has no running job of the session left, and its tasks stopped beating
    deadline = time.monotonic() + 30
    while session_jobs(session):
        assert time.monotonic() < deadline, session_jobs(session)
        time.sleep(0.2)
    # Spark kills an interrupted task's Python worker after spark.python.task.killTimeout (2 s):
    # within 30 s the beats stop for good (none for 3 s; left alone they would beat for 120 s)
    while True:
        before = {path.name: path.read_text() for path in beats.iterdir()}
        time.sleep(3.0)
        if {path.name: path.read_text() for path in beats.iterdir()} == before:
            break
        assert time.monotonic() < deadline + 30, "the job's tasks still run on the server"
    assert pylance.dataset(uri).version == 1
