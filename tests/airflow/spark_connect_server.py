"""A real Spark Connect server for the tests: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` (the jar ships with pyspark) on
``local[2]``, gRPC bound to 127.0.0.1 on a free port; its Python workers run this interpreter.
Stopped by process group at teardown."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from spark_cluster import SPARK_HOME, free_port

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    root: pathlib.Path
    port: int
    process: subprocess.Popen

    @property
    def log(self) -> str:
        return (self.root / "connect-server.log").read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def start_connect_server(root: pathlib.Path, timeout: float = 180.0) -> ConnectServer:
    """Start the server; return when its gRPC port accepts connections."""
    root.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable})
    port = free_port()
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--name", "connect-test",
               "--master", "local[2]", "--conf", f"spark.connect.grpc.binding.port={port}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", f"spark.local.dir={root}",
               "--driver-memory", "1g"]
    with open(root / "connect-server.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                                   start_new_session=True)
    server = ConnectServer(root, port, process)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"Spark Connect server exited ({process.returncode}): {server.log[-3000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
            if time.monotonic() > deadline:
                raise TimeoutError(f"Spark Connect server did not listen in {timeout} s (log in {root})")
            time.sleep(0.3)
    except BaseException:
        server.stop()
        raise


@contextlib.contextmanager
def spark_connect_server(root: pathlib.Path) -> Iterator[ConnectServer]:
    server = start_connect_server(root)
    try:
        yield server
    finally:
        server.stop()
