"""The write job with a Lance source under real ``spark-submit`` ``local[2]`` (no Airflow): it
stages fragments holding exactly the rows pylance reads from the source (version, columns,
filter, ``since_version``), and when an executor cannot read the source the job fails with the
core's error and stages nothing."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.operators._spark_code import build_code_zip, write_launcher
from airflow_lance.spark.spec import SourceSpec, WriteJobResult, WriteJobSpec, pin_lance_source, staging_location


def _source(uri: str) -> None:
    ids = pa.array(range(600), pa.int64())
    pylance.write_dataset(pa.table({"id": ids, "name": pa.array([f"n{i}" for i in range(600)])}), uri,
                          max_rows_per_file=150)
    pylance.write_dataset(pa.table({"id": pa.array(range(600, 700), pa.int64()),
                                    "name": pa.array([f"n{i}" for i in range(600, 700)])}), uri, mode="append")
    pylance.dataset(uri).delete("id % 9 = 0")


def _run_job(work: pathlib.Path, spec: WriteJobSpec, name: str) -> subprocess.CompletedProcess[str]:
    spec_file = work / f"{name}.json"
    spec_file.write_text(spec.to_json())
    command = [shutil.which("spark-submit") or "spark-submit", "--master", "local[2]", "--conf",
               "spark.ui.enabled=false", "--conf", "spark.log.level=WARN", "--py-files", str(build_code_zip(work)),
               str(write_launcher(work)), str(spec_file)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=work,
                          env={**os.environ})


def _spec(source: str, target: str, key: str, **pinned: object) -> WriteJobSpec:
    root, name = staging_location(target, key)
    return WriteJobSpec(uri=target, mode="create", source=SourceSpec.from_fields(lance=pin_lance_source(source, **pinned)),
                        read_version=0, staging_root=root, staging_name=name)


def test_job_copies_the_rows_pylance_reads(tmp_path: pathlib.Path) -> None:
    source, target = str(tmp_path / "source.lance"), str(tmp_path / "target.lance")
    _source(source)
    spec = _spec(source, target, "copy", version=3, columns=["name", "id"], filter="id % 2 = 0", since_version=1)
    process = _run_job(tmp_path, spec, "copy")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    result = WriteJobResult.load(spec.staging_root, spec.staging_name, {})
    assert result is not None and result.schema is not None
    lance.LanceDataset.commit(target, lance.LanceOperation.Overwrite(result.schema, list(result.fragments)), 0)
    expected = pylance.dataset(source, version=3).to_table(columns=["name", "id"], filter="id % 2 = 0 AND id >= 600")
    got = pylance.dataset(target).to_table()
    assert got.schema.names == ["name", "id"]
    assert got.sort_by("id").to_pylist() == expected.sort_by("id").to_pylist()
    assert result.num_rows == expected.num_rows == 45  # even ids 600-698 but multiples of 18


def test_an_unreadable_source_fails_the_job_and_stages_nothing(tmp_path: pathlib.Path) -> None:
    source, target = str(tmp_path / "source.lance"), str(tmp_path / "target.lance")
    _source(source)
    spec = _spec(source, target, "broken")  # pinned and checked while every file was there
    victim = pylance.dataset(source).get_fragments()[1].data_files()[0].path
    os.remove(os.path.join(source, "data", victim))
    process = _run_job(tmp_path, spec, "broken")
    assert process.returncode == 1
    output = (process.stdout + process.stderr).splitlines()  # (spark-submit may pass the driver's stderr to stdout)
    failed = [line for line in output if line.startswith("airflow-lance job failed")]
    assert failed, output[-20:]
    assert failed[-1].startswith("airflow-lance job failed: DataFileNotFoundError: ")
    assert failed[-1].endswith("(on an executor)")
    assert WriteJobResult.load(spec.staging_root, spec.staging_name, {}) is None
    with pytest.raises(lance.DatasetNotFoundError):
        lance.dataset(target)
