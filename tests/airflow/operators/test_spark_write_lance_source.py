"""``LanceSparkWriteOperator`` with a Lance source: the version is pinned and the projection,
filter and ``since_version`` are checked with the connection's storage options before Spark runs
(a bad one is the core's typed error; nothing is submitted). The Spark run itself is the
incremental embedding example (tests/airflow/test_example_incremental_embeddings.py)."""

from __future__ import annotations

import pathlib

import lance as pylance
import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env

import airflow_lance.core as lance
from airflow_lance.operators.spark_write import LanceSparkWriteOperator


@pytest.fixture
def docs(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> str:
    monkeypatch.setenv(*connection_env("lance_default", conn_type="lance", host=str(tmp_path)))
    uri = str(tmp_path / "docs.lance")
    pylance.write_dataset(pa.table({"id": [1, 2, 3], "text": ["a", "b", "c"]}), uri)
    pylance.write_dataset(pa.table({"id": [4], "text": ["d"]}), uri, mode="append")
    pylance.dataset(uri).tags.create("first", 1)
    return uri


def _operator(**source: object) -> LanceSparkWriteOperator:
    return LanceSparkWriteOperator(task_id="copy", uri="out.lance", source_lance_uri="docs.lance", **source)


def test_version_is_pinned_and_fields_pass_through(docs: str) -> None:
    spec = _operator(source_lance_columns=["text"], source_lance_filter="id > 1",
                     source_lance_since_version="1")._lance_source()
    assert (spec.uri, spec.version, spec.columns, spec.filter, spec.since_version) == (
        docs, 2, ("text",), "id > 1", 1)
    assert _operator(source_lance_version="first")._lance_source().version == 1


@pytest.mark.parametrize(("source", "error"), [
    ({"source_lance_version": "9"}, lance.VersionNotFoundError),
    ({"source_lance_version": "no-such-tag"}, lance.TagNotFoundError),
    ({"source_lance_columns": ["nope"]}, lance.InvalidInputError),
    ({"source_lance_filter": "id >>> 2"}, lance.InvalidInputError),
    ({"source_lance_since_version": "5"}, lance.VersionNotFoundError),
])
def test_bad_sources_fail_before_spark(docs: str, source: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        _operator(**source)._lance_source()


def test_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        LanceSparkWriteOperator(task_id="t", uri="o.lance", source_sql="SELECT 1", source_lance_uri="docs.lance")
