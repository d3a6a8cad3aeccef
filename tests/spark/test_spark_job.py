"""The write job under real ``spark-submit`` ``local[2]``, without Airflow: the shipped zip is the
code that runs (driver and executors), Airflow cannot be imported, fragments are staged and nothing
is committed; committing the staged fragments gives the source rows, as pylance reads them."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.operators._spark_code import build_code_zip, write_launcher
from airflow_lance.spark.job import main, read_spec
from airflow_lance.spark.spec import JobSpecError, SourceSpec, WriteJobResult, WriteJobSpec, staging_location

# Refuses any import of Airflow, insists that airflow_lance comes from the shipped zip, and notes
# (per process) where it came from: the job runs as on a cluster that has neither installed.
SITECUSTOMIZE = '''
import importlib.machinery, os, sys

class _ClusterWithoutAirflow:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top == "airflow":
            raise ImportError(f"{name} is not installed on this cluster")
        if name == "airflow_lance":
            spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
            origin = spec.origin if spec else None
            with open(os.path.join(os.environ["LANCE_TEST_MARKS"], str(os.getpid())), "w") as mark:
                mark.write(str(origin))
            if not origin or ".zip" not in origin:
                raise ImportError(f"airflow_lance must come from the shipped zip, not {origin}")
            return spec
        return None

sys.meta_path.insert(0, _ClusterWithoutAirflow())
'''

ROWS = 240


@dataclasses.dataclass
class JobRun:
    spec: WriteJobSpec
    process: subprocess.CompletedProcess[str]
    marks: pathlib.Path


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> JobRun:
    work = tmp_path_factory.mktemp("spark-job")
    source = work / "source"
    source.mkdir()
    for part in range(2):  # JSON lines in two files
        ids = range(part * 120, part * 120 + 120)
        rows = [{"id": i, "name": f"n{i}", "score": i / 2, "tags": [f"t{i % 3}"], "vec": [i, i + 0.5, i + 0.25]}
                for i in ids]
        (source / f"part-{part}.json").write_text("\n".join(json.dumps(r) for r in rows))
    uri = str(work / "ds.lance")
    root, name = staging_location(uri, "job-test")
    spec = WriteJobSpec(
        uri=uri, mode="create", source=SourceSpec.from_fields(path=str(source), format="json",
                                                              options={"primitivesAsString": "false"}),
        read_version=0, staging_root=root, staging_name=name, max_rows_per_file=50, num_partitions=3,
        fixed_size_lists={"vec": 3},
    )
    spec_file = work / "spec.json"
    spec_file.write_text(spec.to_json())
    site, marks = work / "site", work / "marks"
    site.mkdir()
    marks.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {**os.environ, "PYTHONPATH": str(site), "LANCE_TEST_MARKS": str(marks)}
    command = [
        shutil.which("spark-submit") or "spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.log.level=WARN", "--py-files", str(build_code_zip(work)), "--files", str(spec_file),
        # as in cluster deploy mode: the argument is not a file where the driver runs, the spec comes
        # through --files (and the job deletes the copies when it ends)
        str(write_launcher(work)), f"/nonexistent-on-the-driver/{spec_file.name}",
    ]
    process = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=600,
                             check=False)
    return JobRun(spec, process, marks)


def test_job_stages_fragments_and_never_commits(job: JobRun) -> None:
    assert job.process.returncode == 0, job.process.stdout[-3000:] + job.process.stderr[-3000:]
    assert "airflow-lance job: staged" in job.process.stdout
    assert "could not remove the shipped spec" not in job.process.stdout
    result = WriteJobResult.load(job.spec.staging_root, job.spec.staging_name, {})
    assert result is not None and result.spec_digest == job.spec.digest()
    assert result.num_rows == ROWS and sum(f.physical_rows for f in result.fragments) == ROWS
    assert len(result.fragments) >= 6  # 3 partitions of ~80 rows, files of at most 50 rows
    assert all(f.physical_rows <= 50 for f in result.fragments)
    assert result.missing_files(job.spec.uri, {}) == []
    with pytest.raises(lance.DatasetNotFoundError):
        lance.dataset(job.spec.uri)


def test_shipped_zip_ran_everywhere_without_airflow(job: JobRun) -> None:
    origins = [p.read_text() for p in job.marks.iterdir()]
    assert len(origins) >= 2  # the driver and at least one Python worker on the executors
    assert all(".zip" in origin for origin in origins)


def test_committing_the_staged_fragments_gives_the_source_rows(job: JobRun) -> None:
    result = WriteJobResult.load(job.spec.staging_root, job.spec.staging_name, {})
    assert result is not None and result.schema is not None
    lance.LanceDataset.commit(job.spec.uri, lance.LanceOperation.Overwrite(result.schema, list(result.fragments)), 0)
    table = pylance.dataset(job.spec.uri).to_table().sort_by("id")
    assert table.column("id").to_pylist() == list(range(ROWS))
    assert table.column("name").to_pylist() == [f"n{i}" for i in range(ROWS)]
    assert table.column("tags").to_pylist() == [[f"t{i % 3}"] for i in range(ROWS)]
    # Spark's array<double> stored as the vector the spec asked for
    assert table.schema.field("vec").type == pa.list_(pa.field("element", pa.float64()), 3)
    assert table.column("vec").to_pylist() == [[i, i + 0.5, i + 0.25] for i in range(ROWS)]


def test_spec_and_usage_errors_without_spark(tmp_path: pathlib.Path) -> None:
    assert main([]) == 2
    with pytest.raises(JobSpecError, match="not found"):
        read_spec(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(JobSpecError, match="operator and job differ"):
        read_spec(str(bad))
