"""Our core and pylance changing one dataset at the same time, with every kind of operation.

Processes of both engines append, delete, update, upsert, compact, add columns, build and optimise
indices (BTREE, IVF_PQ, full-text), tag and clean up old versions on one dataset, all at once
(``mixed_workers.py``). Afterwards:

* the versions cleanup left (every tagged one among them) have their files, both engines read each
  with the same rows, and both engines' ``validate`` pass on each;
* the latest version holds exactly what the committed operations imply (no lost, duplicated or
  resurrected row, every increment counted once), read by both engines, and every added column
  holds ``id * factor`` (null for rows appended after it);
* the BTREE index answers point and range lookups as a scan does, pylance's full-text search finds
  exactly the live rows, and a search through the IVF_PQ index returns live rows with their current
  values;
* no IVF_PQ segment holds rows of a removed fragment its bitmap lacks (pylance does not mask those:
  its searches would return fewer than k rows, which the search check above sees only by chance).

The short run is part of ``make test``; ``make stress`` runs more workers for longer.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as ours
from airflow_lance.core.indices import vector_remap
from airflow_lance.core.indices.metadata import fragment_bitmap, index_uuid, user_indices

from .check import referenced_files
from .mixed_workers import OWN_SPAN, SHARED, initial, rows

WORKER = str(pathlib.Path(__file__).with_name("mixed_workers.py"))
ROOT = pathlib.Path(__file__).resolve().parents[2]


def start_workers(uri: str, engines: list[str], operations: int, log: pathlib.Path, seed: int,
                  options: dict[str, str] | None = None, only: list[str] | None = None,
                  stop_file: pathlib.Path | None = None, pause: float = 0.0) -> list[subprocess.Popen]:
    """Start one ``mixed_workers.py`` process per engine, drawing among the operations named in ``only`` (all
    by default), until each did ``operations`` or ``stop_file`` exists, waiting up to ``pause`` seconds
    between two operations. Each one's standard error goes to ``worker<n>.err`` beside the log (a pipe nobody reads
    while the test does other work could fill and stall the worker).

    Storage options (credentials) reach the workers in a file only the user can read, never on their
    command lines or in their environment."""
    extra = ["--operations", ",".join(only)] if only else []
    if stop_file is not None:
        extra += ["--stop-file", str(stop_file)]
    if pause:
        extra += ["--pause", str(pause)]
    if options:
        secret = log.with_name("storage_options.json")
        secret.touch(mode=0o600)
        secret.write_text(json.dumps(options))
        extra += ["--storage-options-file", str(secret)]
    procs = []
    for n, engine in enumerate(engines):
        with open(log.with_name(f"worker{n}.err"), "w") as err:
            procs.append(subprocess.Popen(
                [sys.executable, WORKER, engine, uri, str(n), str(seed * 100 + n), str(operations), str(log), *extra],
                stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT))
    return procs


def wait_for_workers(procs: list[subprocess.Popen], engines: list[str], log: pathlib.Path) -> None:
    """Wait for the workers of :func:`start_workers`; fail with the tracebacks of any that failed."""
    for proc in procs:
        proc.wait(timeout=1800)
    failed = [f"worker {n} ({engines[n]}):\n{log.with_name(f'worker{n}.err').read_text()[-4000:]}"
              for n, proc in enumerate(procs) if proc.returncode != 0]
    assert not failed, "\n".join(failed)


def run_workers(uri: str, engines: list[str], operations: int, log: pathlib.Path, seed: int,
                options: dict[str, str] | None = None) -> None:
    """One ``mixed_workers.py`` process per engine, all at once, drawing among every operation."""
    wait_for_workers(start_workers(uri, engines, operations, log, seed, options), engines, log)


def _expected(log: pathlib.Path) -> pa.Table:
    """The rows the committed operations imply, sorted by id."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    shared_alive = np.ones(SHARED, dtype=bool)
    shared_bumps = np.zeros(SHARED, dtype=np.int64)
    own: dict[int, int] = {}  # id -> v of the rows workers own, in each worker's order
    for entry in entries:
        op = entry["op"]
        if op in ("delete", "increment"):
            a, b = entry["range"]
            if b <= SHARED:
                if op == "delete":
                    shared_alive[a:b] = False
                else:
                    shared_bumps[a:b] += 1
                continue
            for key in [k for k in own if a <= k < b]:
                if op == "delete":
                    del own[key]
                else:
                    own[key] += 1
        elif op == "insert":
            for key in range(*entry["ids"]):
                own[key] = key * 1000
        elif op == "upsert":
            for key in entry["ids"]:
                own[key] = key * 1000 + 500
    ids = np.concatenate([np.flatnonzero(shared_alive), np.array(sorted(own), dtype=np.int64)]).astype(np.int64)
    bumps = np.concatenate([shared_bumps[shared_alive],
                            np.array([own[k] - k * 1000 for k in sorted(own)], dtype=np.int64)])
    expected = rows(ids)
    return expected.set_column(1, "v", pa.array(ids * 1000 + bumps))


def _sorted(table: pa.Table) -> pa.Table:
    return table.select(["id", "v", "s", "e"]).sort_by("id")


def _check_versions(uri: str, log: pathlib.Path, options: dict[str, str]) -> None:
    """Every tagged version is among the versions cleanup left, the others run unbroken to the latest
    (local: their files exist), and both engines validate each and read it with the same rows."""
    versions = [v["version"] for v in ours.dataset(uri, **options).versions()]
    tagging = [e for e in map(json.loads, log.read_text().splitlines()) if e["op"] == "tag"]
    tags = {e["tag"]: e["version"] for e in tagging}  # the last entry of a tag is where it points (tags move)
    assert {t: v["version"] for t, v in pylance.dataset(uri, **options).tags.list().items()} == tags
    assert set(tags.values()) <= set(versions)
    # cleanup keeps the tagged versions and every version from the oldest never-tagged one it kept (a version
    # a tag pointed at when a cleanup ran stays after the tag moved on)
    ever_tagged = {e["version"] for e in tagging}
    oldest = min((v for v in versions if v not in ever_tagged), default=versions[-1])
    assert [v for v in versions if v >= oldest] == list(range(oldest, versions[-1] + 1)), versions
    assert versions[-1] == pylance.dataset(uri, **options).latest_version
    if not options:
        missing = [p for p in referenced_files(uri) if not os.path.exists(os.path.join(uri, p))]
        assert not missing, f"manifests reference missing files: {missing}"
    for version in versions:
        mine = ours.dataset(uri, version=version, **options)
        theirs = pylance.dataset(uri, version=version, **options)
        for handle in (mine, theirs):
            handle.validate()  # unique and sorted fragment ids, fragment lengths, indices without overlaps
        assert _sorted(mine.to_table()).equals(_sorted(theirs.to_table())), f"version {version} reads differently"


def _check_added_columns(table: pa.Table, log: pathlib.Path) -> None:
    """Every added column holds ``id * factor`` or null (rows appended after the add), and ``id * factor``
    for every shared row (all there since the start, so the add saw them)."""
    added = [e for e in map(json.loads, log.read_text().splitlines()) if e["op"] == "add_column"]
    assert sorted(c for c in table.column_names if c[0] == "c") == sorted(e["column"] for e in added)
    shared = pc.less(table["id"], SHARED)
    for entry in added:
        column, want = table[entry["column"]], pc.multiply(table["id"], entry["factor"])
        assert pc.all(pc.or_kleene(pc.is_null(column), pc.equal(column, want))).as_py(), entry
        assert pc.all(pc.equal(column.filter(shared), want.filter(shared))).as_py(), entry


def _check_index_rows(dataset: ours.LanceDataset) -> None:
    """No IVF segment (row addresses) holds rows of a removed fragment its bitmap does not name. Only a
    merge insert of some of the columns leaves rows outside a bitmap (the writers upsert whole rows);
    our compaction drops such rows, pylance's moves them."""
    if dataset._stable_row_ids:  # the segments hold row ids: compaction keeps them
        return
    live = {f.fragment_id for f in dataset.get_fragments()}
    for index in user_indices(dataset.manifest_file):
        if vector_remap.can_remap(index):
            stray = vector_remap.fragments_held(dataset.store, index) - live - set(fragment_bitmap(index))
            assert not stray, f"index {index.name} ({index_uuid(index)}) holds rows of removed fragments {stray}"


def check_end_state(uri: str, log: pathlib.Path, storage_options: dict[str, str] | None = None) -> list[dict]:
    """Every check of the module docstring; returns the log's entries."""
    options = {"storage_options": storage_options} if storage_options else {}
    _check_versions(uri, log, options)
    expected = _expected(log)
    mine, theirs = ours.dataset(uri, **options), pylance.dataset(uri, **options)
    assert _sorted(mine.to_table()).equals(expected)
    assert _sorted(theirs.to_table()).equals(expected)
    assert pc.count_distinct(expected["id"]).as_py() == expected.num_rows
    _check_added_columns(mine.to_table(), log)
    _check_index_rows(mine)
    rng = np.random.default_rng(0)
    probe = rng.choice(expected["id"].to_numpy(), size=min(20, expected.num_rows), replace=False)
    missing = [int(k) for k in rng.integers(0, SHARED, 10)] + [OWN_SPAN - 1, 10 * OWN_SPAN]
    if any(i.name == "id_idx" for i in theirs.describe_indices()):
        for key in list(probe) + missing:
            want = expected.filter(pc.equal(expected["id"], int(key)))
            assert _sorted(theirs.to_table(filter=f"id = {key}")).equals(want)
            assert _sorted(mine.to_table(filter=f"id = {key}")).equals(want)
        want = expected.filter(pc.and_(pc.greater_equal(expected["id"], 100), pc.less(expected["id"], 900)))
        assert _sorted(theirs.to_table(filter="id >= 100 AND id < 900")).equals(want)
    if any(i.name == "s_idx" for i in theirs.describe_indices()):
        # pylance's full-text search finds exactly the live row of each ``s`` token ("s{id}")
        live = set(expected["id"].to_pylist())
        for key in list(probe) + missing:
            found = theirs.to_table(full_text_query=f"s{key}", columns=["id"])["id"].to_pylist()
            assert found == ([int(key)] if int(key) in live else []), (key, found)
    if any(i.name == "e_idx" for i in theirs.describe_indices()):
        # pylance's search through the remapped and optimised IVF_PQ index returns live rows only, each
        # with its current values (a stale row address would show a deleted row or another row's values)
        queries = rows(probe[:5]).column("e").to_pylist()
        by_id = {k: i for i, k in enumerate(expected["id"].to_pylist())}
        for query in queries:
            found = theirs.to_table(nearest={"column": "e", "q": query, "k": 10, "nprobes": 2})
            assert found.num_rows == 10
            for row in found.select(["id", "v", "s"]).to_pylist():
                assert row["id"] in by_id, f"the vector index returned row {row['id']}, which is not live"
                assert row["v"] == expected["v"][by_id[row["id"]]].as_py()
    return [json.loads(line) for line in log.read_text().splitlines()]


def _engines(version: str | None, count: int) -> list[str]:
    """Half ours, half pylance; only ours on legacy files, where pylance 14.0.2 alone fails its own updates
    (``integers are ordered up to the 0th element`` from lance-datafusion's chunker, after 187 operations of
    one pylance worker, no concurrency: seed 1300), so pylance only reads and validates there."""
    return ["ours"] * count if version == "legacy" else ["ours", "pylance"] * (count // 2)


def start_dataset(uri: str, stable: bool, writer: str, storage_options: dict[str, str] | None = None,
                  data_storage_version: str | None = None) -> None:
    """The shared rows, in fragments of 500, written by ``writer`` ("ours" or "pylance")."""
    engine = pylance if writer == "pylance" else ours
    options = {"storage_options": storage_options} if storage_options else {}
    if data_storage_version:
        options["data_storage_version"] = data_storage_version
    engine.write_dataset(initial(), uri, max_rows_per_file=500, enable_stable_row_ids=stable, **options)


@pytest.mark.parametrize(("stable", "version"), [(False, None), (True, None), (False, "2.0"), (True, "2.1"),
                                                 (False, "legacy")],
                         ids=["addresses", "stable_row_ids", "2.0", "2.1_stable_row_ids", "legacy"])
def test_two_of_ours_and_two_pylance_doing_everything_at_once(tmp_path, stable, version):
    uri, log = str(tmp_path / "ds.lance"), tmp_path / "log.jsonl"
    start_dataset(uri, stable, "pylance" if stable else "ours", data_storage_version=version)
    engines = _engines(version, 4)
    run_workers(uri, engines, 12, log, seed=1 + stable + 2 * len(version or ""))
    entries = check_end_state(uri, log)
    assert {e["engine"] for e in entries} == set(engines)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "stable", "version"), [(11, False, None), (11, True, None), (12, False, "2.0"),
                                                         (12, True, "2.1"), (13, False, "legacy")])
def test_six_writers_doing_everything_at_once_for_a_while(tmp_path, seed, stable, version):
    uri, log = str(tmp_path / "ds.lance"), tmp_path / "log.jsonl"
    start_dataset(uri, stable, "pylance" if seed % 2 else "ours", data_storage_version=version)
    run_workers(uri, _engines(version, 6), 250, log, seed=seed + 10 * stable)
    entries = check_end_state(uri, log)
    assert {e["op"] for e in entries} >= {"insert", "delete", "increment", "upsert", "compact", "cleanup"}
