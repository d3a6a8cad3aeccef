"""The maintenance task group, night after night, on a dataset that pylance jobs (and one of ours) keep
writing at the same time.

Writer processes (``stress/mixed_workers.py``: two on pylance 14, one on our core) append, delete,
update, upsert, add columns, tag and (with stable row ids) build and optimise indices all the while.
Meanwhile ``dag.test()`` runs ``dags/lance_test_maintenance_beside_writers.py`` for one logical date
after another: stats, compaction when the plan has work, ``optimize_indices``, cleanup of versions older
than 8 s, and the ``release`` tag moved to the maintained version. A compaction task whose fragments a
writer changed meanwhile is left out of the commit (the others land); a commit that loses outright is a
retryable conflict, which the task's Airflow retries take. When the writers are done, one more run (the
quiet night) must run every task once, leave out no compaction task, leave the BTREE and IVF_PQ indices
covering every row and keep only tagged versions and its own.

Then every check of ``stress/test_mixed_concurrency.py``: each version cleanup left reads the same in
both engines and passes both engines' ``validate``; the latest version holds exactly the rows the
writers' committed operations imply; index lookups and searches equal scans. ``make test`` runs four
nights beside writers that pause up to 0.2 s between operations; ``make stress`` runs fourteen (ten with
stable row ids) beside writers that never pause.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import lance as pylance
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, task_logs_to, xcom_value
from stress.test_mixed_concurrency import check_end_state, start_dataset, start_workers, wait_for_workers

import airflow_lance.core as ours

DAG_ID = "lance_test_maintenance_beside_writers"
GROUP = "lance_maintenance"
FIRST_NIGHT = dt.datetime(2025, 6, 2, tzinfo=dt.UTC)
OLDER_THAN_SECONDS = 8
TARGET_ROWS = 1000
ENGINES = ["pylance", "ours", "pylance"]
MAX_OPERATIONS = 100_000  # per writer: the writers stop when the nights of the test are over
#: Without stable row ids our compaction leaves alone the fragments a full-text index covers (pylance 14
#: re-encodes the posting lists there), so that case builds no full-text index and its writers build none.
WRITES = ["append", "delete", "update", "upsert", "tag", "add_column"]


@dataclasses.dataclass
class Night:
    states: dict[str, str]
    tries: dict[str, int]
    xcoms: dict[str, Any]
    seconds: float
    writers_running: bool


def _run_night(dag: Any, index: int, uri: str, log: pathlib.Path, writers_running: bool) -> Night:
    start = time.monotonic()
    dag_run = dag.test(logical_date=FIRST_NIGHT + dt.timedelta(days=index),
                       run_conf={"uri": uri, "target_rows_per_fragment": TARGET_ROWS,
                                 "older_than_seconds": OLDER_THAN_SECONDS})
    tis = task_instances(dag_run)
    night = Night(states={t: str(ti.state) for t, ti in tis.items()}, tries={t: ti.try_number for t, ti in tis.items()},
                  xcoms={t: xcom_value(dag_run, t) for t in tis}, seconds=time.monotonic() - start,
                  writers_running=writers_running)
    tag = night.xcoms.get("tag_release")
    if tag:  # the DAG's commits join the writers' log: the tag check of check_end_state includes ``release``
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"op": "tag", "tag": "release", "version": tag["version"], "worker": -1,
                                     "engine": "airflow", "time": round(time.time(), 3)}) + "\n")
    return night


def _maintain_while_writing(tmp_path: pathlib.Path, stable: bool, nights_while_writing: int, seed: int,
                            pause: float) -> tuple[str, pathlib.Path, list[Night]]:
    """``nights_while_writing`` runs of the DAG while the writers write, each waiting up to ``pause``
    seconds between two operations (they stop after the last of those nights, or after
    ``MAX_OPERATIONS`` each), then the quiet night."""
    uri, log = str(tmp_path / "ds.lance"), tmp_path / "log.jsonl"
    start_dataset(uri, stable, "pylance")
    ds = pylance.dataset(uri)
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    ds.create_index("e", "IVF_PQ", name="e_idx", num_partitions=2, num_sub_vectors=2)
    only = WRITES
    if stable:
        ds.create_scalar_index("s", "INVERTED", name="s_idx")
        only = [*WRITES, "index"]
    nights: list[Night] = []
    stop = tmp_path / "stop"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{tmp_path}"))
        dag = load_dag(f"{DAG_ID}.py", DAG_ID)
        procs = start_workers(uri, ENGINES, MAX_OPERATIONS, log, seed, only=only, stop_file=stop, pause=pause)
        try:
            while len(nights) < nights_while_writing:
                nights.append(_run_night(dag, len(nights), uri, log, all(p.poll() is None for p in procs)))
                if set(nights[-1].states.values()) - {"success", "skipped"}:
                    break
        finally:
            stop.touch()
            wait_for_workers(procs, ENGINES, log)
        if not set(nights[-1].states.values()) - {"success", "skipped"}:
            time.sleep(OLDER_THAN_SECONDS + 1)  # the quiet night: every version of the writers is old enough to go
            nights.append(_run_night(dag, len(nights), uri, log, writers_running=False))
    operations = sum(1 for e in map(json.loads, log.read_text().splitlines()) if e["engine"] != "airflow")
    print(f"\n{len(nights)} nights beside {ENGINES} ({operations} operations committed): " + "; ".join(
        f"{n.seconds:.0f} s{' (writers running)' if n.writers_running else ''}, "
        f"{_summary(n)}, tries {_retried(n) or 'all 1'}" for n in nights), file=sys.stderr)  # stdout: the task logs
    return uri, log, nights


@pytest.fixture(scope="module", autouse=True)
def task_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """The task logs of every night of the module, in one file (Airflow's log handlers keep the stream
    they were first given, so one file for the whole module)."""
    path = tmp_path_factory.mktemp("maintenance-beside-writers") / "task-logs.txt"
    with task_logs_to(path):
        yield path


def _retried(night: Night) -> dict[str, int]:
    return {t.removeprefix(GROUP + "."): k for t, k in night.tries.items() if k > 1}


def _summary(night: Night) -> str:
    stats, compact = night.xcoms[f"{GROUP}.stats"], night.xcoms.get(f"{GROUP}.compact") or {}
    cleanup = night.xcoms.get(f"{GROUP}.cleanup") or {}
    return (f"{stats['num_fragments']} fragments -> {compact.get('fragments_after', stats['num_fragments'])} "
            f"({compact.get('tasks_skipped_conflict', 0)} tasks left out), "
            f"{cleanup.get('old_versions', 0)} versions removed")


def _check(uri: str, log: pathlib.Path, nights: list[Night]) -> None:
    failed = [(n, night.states) for n, night in enumerate(nights) if set(night.states.values()) - {"success", "skipped"}]
    assert not failed, failed
    assert all(night.writers_running for night in nights[:-1]), "a night ran after a writer had finished"
    # the nights did their work while the writers wrote
    compactions = [n.xcoms[f"{GROUP}.compact"] for n in nights if n.states[f"{GROUP}.compact"] == "success"]
    assert sum(c["fragments_removed"] for c in compactions) > 0
    assert any(n.xcoms[f"{GROUP}.optimize_indices"]["optimized"] for n in nights)
    assert sum(n.xcoms[f"{GROUP}.cleanup"]["old_versions"] for n in nights) > 0
    entries = check_end_state(uri, log)
    assert {e["engine"] for e in entries} == {"ours", "pylance", "airflow"}
    # the quiet night: every task ran once, its compaction committed every task it planned, its
    # optimisation left the BTREE and IVF_PQ indices covering every row, and its cleanup left only
    # tagged versions, the one ``release`` named while it ran, and the night's own
    quiet = nights[-1]
    assert set(quiet.tries.values()) == {1}, quiet.tries
    assert (quiet.xcoms[f"{GROUP}.compact"] or {}).get("tasks_skipped_conflict", 0) == 0  # None: nothing to do
    ds = ours.dataset(uri)
    assert {name: ours.unindexed_rows(ds, name) for name in ("id_idx", "e_idx")} == {"id_idx": 0, "e_idx": 0}
    tagged = {v["version"] for v in pylance.dataset(uri).tags.list().values()}
    first_of_quiet_night = quiet.xcoms[f"{GROUP}.stats"]["version"]
    kept = tagged | {quiet.xcoms["tag_release"]["previous_version"]}
    assert all(v["version"] in kept or v["version"] >= first_of_quiet_night for v in ds.versions())


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_nightly_maintenance_while_pylance_writes(tmp_path: pathlib.Path, stable: bool) -> None:
    _check(*_maintain_while_writing(tmp_path, stable, nights_while_writing=4, seed=41 + stable, pause=0.2))


@pytest.mark.slow
@pytest.mark.parametrize(("stable", "nights"), [(False, 14), (True, 10)], ids=["addresses", "stable_row_ids"])
def test_a_fortnight_of_nightly_maintenance_while_pylance_writes(tmp_path: pathlib.Path, stable: bool,
                                                                 nights: int) -> None:
    """Writers that never pause: about ten commits a second on two cores. With stable row ids the
    pylance writers also optimise every index about once a second; past twelve nights (about 1,700
    fragments, since each commit adds one) a compaction attempt there takes long enough that a write
    lands during nearly every commit, and a night's compaction runs for many minutes, so that case
    runs ten nights."""
    _check(*_maintain_while_writing(tmp_path, stable, nights_while_writing=nights, seed=51 + stable, pause=0.0))
