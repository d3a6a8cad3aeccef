"""A real standalone Spark cluster for the tests: one master and two workers on 127.0.0.1, each a
JVM of its own (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), every
worker with its own work directory, one core and 1 GiB. Stopped by process group at teardown.

Executors run in the workers' directories (``<work dir>/<app id>/<executor id>/``), so a test can
tell from there which executors ran a job, and what they printed (``stderr``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyspark

SPARK_HOME = pathlib.Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SparkCluster:
    root: pathlib.Path
    port: int
    ui_port: int
    work_dirs: list[pathlib.Path]
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def executor_dirs(self, app_id: str | None = None) -> dict[str, list[pathlib.Path]]:
        """Worker work dir name -> executor directories (``<app id>/<executor id>``) in it."""
        pattern = f"{app_id}/*" if app_id else "app-*/*"
        return {d.name: sorted(p for p in d.glob(pattern) if p.is_dir()) for d in self.work_dirs}

    def applications(self) -> list[str]:
        return sorted({p.name for d in self.work_dirs for p in d.glob("app-*")})

    def executor_stderr(self, app_id: str) -> str:
        return "\n".join(p.joinpath("stderr").read_text(errors="replace")
                         for dirs in self.executor_dirs(app_id).values() for p in dirs if p.joinpath("stderr").exists())

    def stop(self) -> None:
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=20)


def _spawn(cluster: SparkCluster, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = open(cluster.root / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
    try:
        process = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        log.close()
    cluster.processes.append(process)
    return process


def start_cluster(root: pathlib.Path, workers: int = 2, timeout: float = 120.0,
                  distinct_hosts: bool = False) -> SparkCluster:
    """Start a master and ``workers`` workers (1 core, 1 GiB each); return when all registered.

    ``distinct_hosts``: worker ``i`` and its executors bind 127.0.0.<i + 1> instead of 127.0.0.1, so
    Spark sees as many hosts as workers (it never runs a speculative copy of a task on the host of
    the attempt it duplicates)."""
    root.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(root),
                "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=false"})
    cluster = SparkCluster(root, free_port(), free_port(), [root / f"worker-{i}" for i in range(workers)])
    try:
        _spawn(cluster, "master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(cluster.port), "--webui-port", str(cluster.ui_port)], env)
        for i, work_dir in enumerate(cluster.work_dirs):
            work_dir.mkdir()
            host = f"127.0.0.{i + 1}" if distinct_hosts else "127.0.0.1"
            _spawn(cluster, f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", cluster.master_url,
                                            "--host", host, "--port", str(free_port()),
                                            "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g",
                                            "--work-dir", str(work_dir)], {**env, "SPARK_LOCAL_IP": host})
        deadline = time.monotonic() + timeout
        while True:
            dead = [p.args for p in cluster.processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Spark cluster process exited: {dead}")
            with contextlib.suppress(OSError, ValueError):
                if len(cluster.alive_workers()) == workers:
                    return cluster
            if time.monotonic() > deadline:
                raise TimeoutError(f"{workers} Spark workers did not register in {timeout} s (logs in {root})")
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise


@contextlib.contextmanager
def spark_cluster(root: pathlib.Path, workers: int = 2, distinct_hosts: bool = False) -> Iterator[SparkCluster]:
    cluster = start_cluster(root, workers, distinct_hosts=distinct_hosts)
    try:
        yield cluster
    finally:
        cluster.stop()
