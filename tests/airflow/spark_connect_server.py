"""A real Spark Connect server for the tests: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` (the jar ships with pyspark) on
``local[2]``, gRPC bound to 127.0.0.1 on a free port; its Python workers run this interpreter.
With a ``token`` the server requires it from every client (Spark's
``PreSharedKeyAuthenticationInterceptor``; given in the server's environment as
``SPARK_CONNECT_AUTHENTICATE_TOKEN``, never on its command line). Its web UI listens on another
free port (the REST API lists the running jobs and their Connect session tags).
Stopped by process group at teardown."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from spark_cluster import SPARK_HOME, free_port

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    root: pathlib.Path
    port: int
    process: subprocess.Popen
    ui_port: int
    token: str | None = None

    def running_jobs(self) -> list[dict]:
        """The application's running Spark jobs (REST API of the web UI), each with its ``jobTags``
        (a Connect operation's: ``SparkConnect_OperationTag_User_<user>_Session_<id>_Operation_<id>``)."""
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=120) as response:  # noqa: S310 - the local test server
            (application,) = json.load(response)
        with urllib.request.urlopen(f"{base}/{application['id']}/jobs?status=running",  # noqa: S310
                                    timeout=120) as response:
            return list(json.load(response))

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


def start_connect_server(root: pathlib.Path, timeout: float = 180.0, token: str | None = None) -> ConnectServer:
    """Start the server (requiring ``token`` if given); return when its gRPC port accepts connections."""
    root.mkdir(parents=True, exist_ok=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW", "_AIRFLOW"))}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable})
    if token:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    port, ui_port = free_port(), free_port()
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--name", "connect-test",
               "--master", "local[2]", "--conf", f"spark.connect.grpc.binding.port={port}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=true",
               "--conf", f"spark.ui.port={ui_port}", "--conf", "spark.port.maxRetries=0",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", f"spark.local.dir={root}",
               "--driver-memory", "1g"]
    with open(root / "connect-server.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                                   start_new_session=True)
    server = ConnectServer(root, port, process, ui_port, token)
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
def spark_connect_server(root: pathlib.Path, token: str | None = None) -> Iterator[ConnectServer]:
    server = start_connect_server(root, token=token)
    try:
        yield server
    finally:
        server.stop()
