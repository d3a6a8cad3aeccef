"""`make demo`: the ingest example DAG end to end, as a DAG author would run it.

Sets up a throwaway Airflow home (embedded SQLite metadata database), a ``lance_default``
connection whose dataset root is on local disk and a ``spark_default`` connection for
``local[2]`` (both as ``AIRFLOW_CONN_*`` JSON), runs ``airflow db migrate`` and
``airflow dags test example_lance_ingest``, then prints what the run did: task states, the
dataset's version history with row counts, and whether pylance (if installed) opens the
dataset with identical contents. The full Airflow/Spark output goes to ``dags-test.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import airflow_lance.core as lance

DAG_ID = "example_lance_ingest"
EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "example_dags"


def demo_environment(root: pathlib.Path) -> dict[str, str]:
    """Environment of the Airflow commands: everything lives below ``root``."""
    bin_dir = os.path.dirname(sys.executable)
    return {
        **os.environ,
        "AIRFLOW_HOME": str(root / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLES),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_LANCE_DEFAULT": json.dumps({"conn_type": "lance", "host": f"file://{root / 'lance'}"}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_LANCE_EXAMPLE_DATA": str(root / "data"),
        "AIRFLOW_LANCE_EXAMPLE_DATASET": str(root / "lance" / "readings.lance"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
    }


def _airflow(args: list[str], env: dict[str, str], log: pathlib.Path) -> int:
    with log.open("a") as out:
        out.write(f"\n$ airflow {' '.join(args)}\n")
        out.flush()
        return subprocess.run([sys.executable, "-m", "airflow", *args], env=env, stdout=out,
                              stderr=subprocess.STDOUT, check=False).returncode


def _print_task_states(env: dict[str, str]) -> bool:
    """Print each task's state and duration from the metadata database; True if all succeeded."""
    os.environ.update({k: v for k, v in env.items() if k.startswith("AIRFLOW")})
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.state, TaskInstance.try_number, TaskInstance.duration)
            .where(TaskInstance.dag_id == DAG_ID).order_by(TaskInstance.start_date)
        ).all()
    for task_id, state, tries, duration in rows:
        print(f"  {task_id:22s} {state:8s} {duration or 0:6.1f} s  (try {tries})")
    return bool(rows) and all(state == "success" for _, state, _, _ in rows)


def _print_dataset(uri: str) -> None:
    ds = lance.dataset(uri)
    print(f"dataset {uri}")
    print("version history:")
    for entry in ds.versions():
        meta = entry["metadata"]
        txn = ds.read_transaction(entry["version"])
        message = txn.transaction_properties.get("__lance_commit_message", "") if txn else ""
        print(f"  v{entry['version']}  {entry['timestamp']:%Y-%m-%d %H:%M:%S}  {txn.kind if txn else '?':9s} "
              f"rows={meta['total_rows']:>6}  fragments={meta['total_fragments']}  bytes={meta['total_files_size']}"
              f"  {message}")
    for version in range(1, ds.version + 1):
        print(f"  row count at version {version}: {ds.checkout_version(version).count_rows()}")
    counts = ds.to_table(columns=["sensor"]).column("sensor").value_counts().to_pylist()
    print("  rows per sensor:", ", ".join(f"{c['values']}={c['counts']}" for c in counts))


def _cross_check(uri: str) -> None:
    try:
        import lance as pylance
    except ImportError:
        print("pylance is not installed: skipping the cross-check")
        return
    ours, theirs = lance.dataset(uri), pylance.dataset(uri)
    same = all(
        theirs.checkout_version(v).to_table().equals(ours.checkout_version(v).to_table())
        for v in range(1, ours.version + 1)
    )
    print(f"pylance {pylance.__version__} opens version {theirs.version} with {theirs.count_rows()} rows; "
          f"every version identical: {same}")
    if not same:
        raise SystemExit("pylance disagrees with airflow-lance")


def _fail(message: str, log: pathlib.Path) -> None:
    tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
    raise SystemExit("\n".join([*tail, message]))


def run(root: pathlib.Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SystemExit("Spark needs Java 17+: install a JDK (e.g. apt-get install openjdk-17-jre-headless)")
    env = demo_environment(root)
    log = root / "dags-test.log"
    uri = str(root / "lance" / "readings.lance")
    print(f"airflow home, sample data and dataset under {root} (Airflow and Spark output: {log})")
    start = time.monotonic()
    if _airflow(["db", "migrate"], env, log) != 0:
        _fail("airflow db migrate failed", log)
    print(f"metadata database ready ({time.monotonic() - start:.0f} s); running `airflow dags test {DAG_ID}` ...")
    start = time.monotonic()
    code = _airflow(["dags", "test", DAG_ID], env, log)
    print(f"`airflow dags test {DAG_ID}` finished in {time.monotonic() - start:.0f} s (exit status {code}):")
    if not _print_task_states(env) or code != 0:
        _fail("the DAG run did not succeed (the end of its log is above)", log)
    _print_dataset(uri)
    _cross_check(uri)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=pathlib.Path, help="directory for everything (default: a temp dir, removed)")
    args = parser.parse_args()
    if args.root:
        args.root.mkdir(parents=True, exist_ok=True)
        if (args.root / "lance" / "readings.lance").exists():
            raise SystemExit(f"{args.root} holds a previous run's dataset: use an empty directory")
        run(args.root.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="airflow-lance-demo-") as tmp:
            run(pathlib.Path(tmp))


if __name__ == "__main__":
    main()
