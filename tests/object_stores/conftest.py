"""Session-wide storage servers and the backend matrix of the contract suite.

Each server starts once per test session, on the first test that needs it,
on free 127.0.0.1 ports, and is stopped by its pid at the end.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from . import servers

# Loopback traffic must never go through a proxy from the environment.
os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
os.environ["no_proxy"] = os.environ["NO_PROXY"]

BUCKET = "lance"
DDB_TABLE = "lance-manifests"


@dataclasses.dataclass(frozen=True)
class Backend:
    """One store under test: fresh dataset URIs and the storage options (pylance's names)."""

    name: str
    new_uri: Callable[[str], str]
    options: dict[str, str]
    server: servers.Server | None = None


@pytest.fixture(scope="session")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("servers")


def _serve(start: Callable[[pathlib.Path], servers.Server], work_dir: pathlib.Path) -> Iterator[servers.Server]:
    try:
        server = start(work_dir)
    except servers.ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def seaweedfs(server_dir: pathlib.Path) -> Iterator[servers.Server]:
    for server in _serve(servers.start_seaweedfs, server_dir):
        servers.create_bucket(server.endpoint, BUCKET)
        yield server


@pytest.fixture(scope="session")
def moto(server_dir: pathlib.Path) -> Iterator[servers.Server]:
    for server in _serve(servers.start_moto, server_dir):
        servers.create_bucket(server.endpoint, BUCKET)
        yield server


@pytest.fixture(scope="session")
def dynalite(server_dir: pathlib.Path) -> Iterator[servers.Server]:
    for server in _serve(servers.start_dynalite, server_dir):
        servers.create_lance_table(server.endpoint, DDB_TABLE)
        yield server


@pytest.fixture(scope="session")
def azurite(server_dir: pathlib.Path) -> Iterator[servers.Server]:
    for server in _serve(servers.start_azurite, server_dir):
        servers.create_container(server.endpoint, BUCKET)
        yield server


@pytest.fixture(scope="session")
def fake_gcs(server_dir: pathlib.Path) -> Iterator[servers.Server]:
    for server in _serve(servers.start_fake_gcs, server_dir):
        servers.create_gcs_bucket(server.endpoint, BUCKET)
        yield server


def _unique(scheme: str) -> Callable[[str], str]:
    return lambda name: f"{scheme}{BUCKET}/{uuid.uuid4().hex[:12]}/{name}"


BACKENDS = ["local", "memory", "s3-seaweedfs", "s3-moto", "azure-azurite", "gcs-fake"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Backend:
    """Every backend of the contract suite, each on its real server."""
    name = request.param
    if name == "local":
        return Backend(name, lambda n: str(tmp_path / uuid.uuid4().hex[:8] / n), {})
    if name == "memory":
        return Backend(name, lambda n: f"memory://{uuid.uuid4().hex[:12]}/{n}", {})
    if name.startswith("s3-"):
        server = request.getfixturevalue(name[3:])
        return Backend(name, _unique("s3://"), servers.s3_options(server.endpoint), server)
    if name == "azure-azurite":
        server = request.getfixturevalue("azurite")
        return Backend(name, _unique("az://"), servers.azure_options(server.endpoint), server)
    server = request.getfixturevalue("fake_gcs")
    return Backend(name, _unique("gs://"), servers.gcs_options(server.endpoint), server)


@pytest.fixture
def s3_seaweedfs(seaweedfs: servers.Server) -> Backend:
    return Backend("s3-seaweedfs", _unique("s3://"), servers.s3_options(seaweedfs.endpoint), seaweedfs)


@pytest.fixture
def s3_moto(moto: servers.Server) -> Backend:
    return Backend("s3-moto", _unique("s3://"), servers.s3_options(moto.endpoint), moto)


@pytest.fixture
def azure_azurite(azurite: servers.Server) -> Backend:
    return Backend("azure-azurite", _unique("az://"), servers.azure_options(azurite.endpoint), azurite)


@pytest.fixture
def gcs_fake(fake_gcs: servers.Server) -> Backend:
    return Backend("gcs-fake", _unique("gs://"), servers.gcs_options(fake_gcs.endpoint), fake_gcs)


@pytest.fixture
def ddb(seaweedfs: servers.Server, dynalite: servers.Server) -> Backend:
    """``s3+ddb://`` datasets: S3 on SeaweedFS, the DynamoDB table on dynalite. ``server`` is dynalite."""
    options = {**servers.s3_options(seaweedfs.endpoint), "dynamodb_endpoint": dynalite.endpoint}
    return Backend(
        "s3+ddb",
        lambda n: f"s3+ddb://{BUCKET}/{uuid.uuid4().hex[:12]}/{n}?ddbTableName={DDB_TABLE}",
        options,
        dynalite,
    )
