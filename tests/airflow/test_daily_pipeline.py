"""The README's daily pipeline (example_dags/example_lance_daily_pipeline.py) day after day on S3.

``dag.test()`` runs the DAG for consecutive logical dates against SeaweedFS (a real S3 server):
the day's Spark write, a Spark SQL append, the version sensor, the expiry of an old tag, the
maintenance task group (stats, compaction, cleanup with ``retain_versions=2``) and the day's tag.
On one day (the third of the week) the ingest task fails right after its commit landed and
Airflow retries it.
After every day pylance reads the dataset; after the last, the bytes under the dataset's prefix
are compared with pylance doing the same week (same data, compaction, cleanup and tags).

The short variant (two days, the retry on the second: the first writes after a cleanup removed
versions) runs in ``make test``; five days with the retry on the third run in ``make stress``
(``--run-slow``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from lance_airflow_testing import SparkSubmitSpy, connection_env, load_dag, task_instances, xcom_value
from object_stores import servers
from object_stores.conftest import BUCKET, seaweedfs, server_dir  # noqa: F401 (session fixtures)

import airflow_lance.core as lance

DAG_ID = "example_lance_daily_pipeline"
FIRST_DAY = dt.datetime(2025, 3, 3, tzinfo=dt.timezone.utc)
GROUP = "lance_maintenance"
BRANCH_SKIPPABLE = {f"{GROUP}.compact"}  # the group's branch skips compaction when there is too little to do
RETAIN_VERSIONS, KEEP_DAILY_TAGS, TARGET_ROWS = 2, 2, 1_048_576  # the DAG's defaults, mirrored by pylance


@dataclasses.dataclass
class Day:
    """What one day's run did and what pylance saw right after it."""

    ds: str
    states: dict[str, str]
    failures: dict[str, str]
    xcoms: dict[str, Any]
    try_numbers: dict[str, int]
    spark_jobs: int
    seconds: float
    table: pa.Table | None = None
    version: int | None = None
    versions: list[int] = dataclasses.field(default_factory=list)
    tags: dict[str, int] = dataclasses.field(default_factory=dict)
    tagged_rows: dict[str, int] = dataclasses.field(default_factory=dict)
    version_at_injected_failure: int | None = None
    properties_at_injected_failure: dict[str, str] = dataclasses.field(default_factory=dict)
    run_id: str = ""


@dataclasses.dataclass
class Week:
    uri: str
    prefix: str
    options: dict[str, str]
    data_dir: pathlib.Path
    days: list[Day]
    bytes: int
    endpoint: str
    task_ids: list[str]
    retry_day: int  # the ingest of this day (1-based) fails after its commit landed; the retry must add nothing

    def expected(self, through_day: int) -> pa.Table:
        """Every source row up to that day, as the DAG defines them: readings plus late readings with a value."""
        parts = []
        for day in self.days[:through_day]:
            parts.append(pq.read_table(self.data_dir / day.ds / "readings.parquet"))
            late = pq.read_table(self.data_dir / day.ds / "late.parquet")
            parts.append(late.filter(pc.is_valid(late["reading"])))
        return pa.concat_tables(parts)


def _rows(table: pa.Table) -> dict[str, list[Any]]:
    """Contents in id order (Spark marks its non-null columns ``not null``: nullability is not compared)."""
    return table.sort_by("id").to_pydict()


def bytes_under(endpoint: str, prefix: str) -> int:
    """Total size of the objects below ``prefix`` of the test bucket."""
    client = servers.botocore_client("s3", endpoint)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)  # type: ignore[attr-defined]
    return sum(item["Size"] for page in pages for item in page.get("Contents", []))


def _lance_connection(root: str, endpoint: str) -> dict[str, Any]:
    extra = {"region": "us-east-1", "endpoint": endpoint, "allow_http": True}
    return {"conn_type": "lance", "host": root, "login": servers.S3_KEY, "password": servers.S3_SECRET,
            "extra": json.dumps(extra)}


class Recorder:
    """Test instrumentation of the loaded DAG: failures of every task, and on the retry day an
    ingest whose first try fails right after its commit landed (as a worker lost at that moment)."""

    def __init__(self, dag: Any, uri: str, options: dict[str, str]) -> None:
        self.failures: dict[str, str] = {}
        self.version_at_injected_failure: int | None = None
        self.properties_at_injected_failure: dict[str, str] = {}
        self.uri, self.options = uri, options
        for task in dag.tasks:
            task.on_failure_callback = [self._record]
        self.ingest = dag.task_dict["ingest"]
        self.ingest.retry_delay = dt.timedelta(0)

    def _record(self, context: Any) -> None:
        exc = context.get("exception")
        self.failures[context["ti"].task_id] = f"{type(exc).__name__}: {exc}"

    def _fail_after_commit(self, context: Any) -> None:
        if context["ti"].try_number == 1:
            ds = lance.dataset(self.uri, storage_options=self.options)
            txn = ds.read_transaction(ds.version)
            self.version_at_injected_failure = ds.version
            self.properties_at_injected_failure = dict(txn.transaction_properties) if txn is not None else {}
            raise RuntimeError("injected: the worker was lost after the commit landed")

    def fail_ingest_after_commit(self, enabled: bool) -> None:
        if enabled:
            self.ingest.post_execute = self._fail_after_commit
        else:
            vars(self.ingest).pop("post_execute", None)


def _run_days(dag: Any, recorder: Recorder, days: int, retry_day: int, data_dir: pathlib.Path,
              spy: SparkSubmitSpy, uri: str, options: dict[str, str]) -> list[Day]:
    """Run the DAG for ``days`` consecutive logical dates; stop after the first day that fails."""
    results: list[Day] = []
    for index in range(days):
        logical_date = FIRST_DAY + dt.timedelta(days=index)
        recorder.failures.clear()
        recorder.version_at_injected_failure, recorder.properties_at_injected_failure = None, {}
        recorder.fail_ingest_after_commit(index + 1 == retry_day)
        jobs_before, start = len(spy.calls()), time.monotonic()
        dag_run = dag.test(logical_date=logical_date, run_conf={"data_dir": str(data_dir)})
        tis = task_instances(dag_run)
        day = Day(
            ds=logical_date.date().isoformat(),
            states={t: str(ti.state) for t, ti in tis.items()},
            failures=dict(recorder.failures),
            xcoms={t: xcom_value(dag_run, t) for t in tis},
            try_numbers={t: ti.try_number for t, ti in tis.items()},
            spark_jobs=len(spy.calls()) - jobs_before,
            seconds=time.monotonic() - start,
            version_at_injected_failure=recorder.version_at_injected_failure,
            properties_at_injected_failure=recorder.properties_at_injected_failure,
            run_id=dag_run.run_id,
        )
        results.append(day)
        ds = pylance.dataset(uri, storage_options=options) if dag_run.state == "success" else None
        if ds is None:
            break
        day.table, day.version = ds.to_table(), ds.version
        day.versions = [v["version"] for v in ds.versions()]
        day.tags = {name: entry["version"] for name, entry in ds.tags.list().items()}
        day.tagged_rows = {name: ds.checkout_version(name).count_rows() for name in day.tags}
    recorder.fail_ingest_after_commit(False)
    return results


@pytest.fixture(scope="module", params=[
    pytest.param((2, 2), id="2-days"),
    pytest.param((5, 3), id="5-days", marks=pytest.mark.slow),
])
def week(request: pytest.FixtureRequest, seaweedfs: servers.Server,  # noqa: F811
         spark_submit_spy: SparkSubmitSpy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    prefix = f"{uuid.uuid4().hex[:12]}/pipeline"
    uri = f"s3://{BUCKET}/{prefix}/daily_readings.lance"
    options = servers.s3_options(seaweedfs.endpoint)
    data_dir = tmp_path_factory.mktemp("daily-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", **_lance_connection(f"s3://{BUCKET}/{prefix}", seaweedfs.endpoint)))
        dag = load_dag("example_lance_daily_pipeline.py", DAG_ID)
        recorder = Recorder(dag, uri, options)
        days = _run_days(dag, recorder, *request.param, data_dir, spark_submit_spy, uri, options)
    print(f"\n{request.param[0]} days of {DAG_ID} on SeaweedFS: " + ", ".join(
        f"{d.ds} {d.seconds:.0f} s ({d.spark_jobs} Spark jobs)" for d in days))
    yield Week(uri, prefix, options, data_dir, days, bytes_under(seaweedfs.endpoint, prefix), seaweedfs.endpoint,
               list(dag.task_ids), request.param[1])


def _failed_days(week: Week) -> list[str]:
    return [f"{d.ds}: {d.failures or d.states}" for d in week.days
            if d.failures or not set(d.states.values()) <= {"success", "skipped"}]


def test_every_day_runs_every_task(week: Week, request: pytest.FixtureRequest) -> None:
    assert _failed_days(week) == []
    assert len(week.days) == request.node.callspec.params["week"][0]
    for number, day in enumerate(week.days, start=1):
        skipped = {t for t, state in day.states.items() if state == "skipped"}
        assert skipped <= BRANCH_SKIPPABLE, (day.ds, skipped)
        assert set(day.states) == set(week.task_ids), day.states
        retried = {t: n for t, n in day.try_numbers.items() if n > 1}
        assert retried == ({"ingest": 2} if number == week.retry_day else {}), day.ds
    # every day after the first writes after a cleanup removed versions
    assert all(d.xcoms[f"{GROUP}.cleanup"]["old_versions"] > 0 for d in week.days)
    assert week.days[0].xcoms["ingest"]["read_version"] == 0  # the first day created the dataset


def test_pylance_reads_exactly_the_rows_of_every_day_so_far(week: Week) -> None:
    assert _failed_days(week) == []
    for number, day in enumerate(week.days, start=1):
        assert day.table is not None
        expected = week.expected(number)
        assert day.table.num_rows == expected.num_rows, day.ds
        assert _rows(day.table) == _rows(expected), day.ds
    assert week.days[-1].table.schema.field("embedding").type == pa.list_(pa.field("item", pa.float32()), 8)


def test_tags_keep_recent_days_readable_and_cleanup_keeps_the_rest_bounded(week: Week) -> None:
    assert _failed_days(week) == []
    for number, day in enumerate(week.days, start=1):
        kept = week.days[max(0, number - KEEP_DAILY_TAGS):number]
        assert set(day.tags) == {f"daily-{d.ds.replace('-', '')}" for d in kept}, day.ds
        assert day.tags[f"daily-{day.ds.replace('-', '')}"] == day.version
        for tagged_day_number, tagged in enumerate(kept, start=number - len(kept) + 1):
            assert day.tagged_rows[f"daily-{tagged.ds.replace('-', '')}"] == week.expected(tagged_day_number).num_rows
        # the latest retain_versions versions plus the tagged ones, nothing else
        newest = set(range(day.version - RETAIN_VERSIONS + 1, day.version + 1))
        assert set(day.versions) == newest | set(day.tags.values()), day.ds


def test_retry_after_the_commit_landed_adds_nothing(week: Week) -> None:
    assert _failed_days(week) == []
    day = week.days[week.retry_day - 1]
    assert day.try_numbers["ingest"] == 2 and day.states["ingest"] == "success"
    landed = day.xcoms["ingest"]["version"]
    # the first try's commit had landed when it failed
    assert day.version_at_injected_failure == landed
    assert {k: day.properties_at_injected_failure.get(f"airflow.{k}") for k in ("run_id", "task_id", "try_number")} == {
        "run_id": day.run_id, "task_id": "ingest", "try_number": "1"}
    # the retry committed nothing: the late append read (and followed) the first try's version
    assert day.xcoms["append_late"]["read_version"] == landed
    assert day.xcoms["append_late"]["version"] == landed + 1
    assert day.xcoms["ingest"]["num_rows"] == pq.read_metadata(week.data_dir / day.ds / "readings.parquet").num_rows
    # ... ran no Spark job (the ingest's first try and the late append, as on the other days) ...
    assert [d.spark_jobs for d in week.days] == [2] * len(week.days)
    # ... and the rows of the day are there once (pylance's count after the day, all days checked above)
    assert day.table is not None and day.table.num_rows == week.expected(week.retry_day).num_rows


def _pylance_week(week: Week, prefix: str) -> int:
    """The same days with pylance: write, append, expire the old tag, compact when the DAG did,
    cleanup with the same policy, tag; the bytes under ``prefix``."""
    uri = f"s3://{BUCKET}/{prefix}/daily_readings.lance"
    for number, day in enumerate(week.days, start=1):
        readings = pq.read_table(week.data_dir / day.ds / "readings.parquet")
        late = pq.read_table(week.data_dir / day.ds / "late.parquet")
        schema = day.table.schema if day.table is not None else None
        for table in (readings, late.filter(pc.is_valid(late["reading"]))):
            pylance.write_dataset(table.cast(schema), uri, mode="append", storage_options=week.options)
        ds = pylance.dataset(uri, storage_options=week.options)
        expired = number - KEEP_DAILY_TAGS
        if expired >= 1 and f"daily-{week.days[expired - 1].ds.replace('-', '')}" in ds.tags.list():
            ds.tags.delete(f"daily-{week.days[expired - 1].ds.replace('-', '')}")
        if day.states[f"{GROUP}.compact"] == "success":
            ds.optimize.compact_files(target_rows_per_fragment=TARGET_ROWS)
        ds = pylance.dataset(uri, storage_options=week.options)
        ds.cleanup_old_versions(retain_versions=RETAIN_VERSIONS, error_if_tagged_old_versions=False)
        ds.tags.create(f"daily-{day.ds.replace('-', '')}", ds.version)
    return bytes_under(week.endpoint, prefix)


def test_storage_stays_within_1_2x_of_pylance_doing_the_same_days(week: Week) -> None:
    assert _failed_days(week) == []
    reference = _pylance_week(week, f"{uuid.uuid4().hex[:12]}/pylance")
    print(f"\nbytes after {len(week.days)} days: ours {week.bytes:,}, pylance {reference:,} "
          f"({week.bytes / reference:.2f}x)")
    assert 0 < week.bytes <= 1.2 * reference
