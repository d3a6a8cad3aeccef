"""The code zip shipped to Spark (``--py-files``): every module goes in with its compiled bytecode,
which a Python of the same version imports instead of compiling the source, and which a changed
source or another Python version ignores; the job's imports leave pandas out."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import struct
import subprocess
import sys
import zipfile

from airflow_lance.operators._spark_code import build_code_zip

#: Imports the job's entry module from the zip given as argv[1]; prints where each module came from.
PROBE = """
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import airflow_lance.spark.job as job, airflow_lance.core.errors as errors
try:
    job.parse_spec(b"not a spec")
except Exception as exc:
    frames = [(f.filename, f.lineno, f.line) for f in traceback.extract_tb(exc.__traceback__)]
print(json.dumps({"job": job.__file__, "errors": errors.__file__,
                  "marker": getattr(errors, "ZIP_PROBE_MARKER", None), "frames": frames,
                  "heavy": sorted({"pandas", "pyarrow.dataset"} & set(sys.modules))}))
"""


def _probe(code_zip: pathlib.Path) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, str(code_zip)], capture_output=True, text=True,
                            check=True, cwd=code_zip.parent)
    return json.loads(result.stdout)


def test_every_module_is_shipped_with_checked_hash_based_bytecode(tmp_path: pathlib.Path) -> None:
    with zipfile.ZipFile(build_code_zip(tmp_path)) as archive:
        names = set(archive.namelist())
        sources = sorted(n for n in names if n.endswith(".py"))
        assert "airflow_lance/spark/job.py" in sources and "airflow_lance/core/errors.py" in sources
        assert {n for n in names if n.endswith(".pyc")} == {n + "c" for n in sources}
        for name in sources:
            source, compiled = archive.read(name), archive.read(name + "c")
            assert compiled[:4] == importlib.util.MAGIC_NUMBER
            assert struct.unpack("<I", compiled[4:8])[0] == 0b11  # hash-based, checked against the source
            assert compiled[8:16] == importlib.util.source_hash(source)


def test_the_job_imports_the_bytecode_and_tracebacks_show_the_source(tmp_path: pathlib.Path) -> None:
    probe = _probe(build_code_zip(tmp_path))
    assert probe["job"] == str(tmp_path / "airflow_lance.zip" / "airflow_lance" / "spark" / "job.pyc")
    assert probe["errors"].endswith("errors.pyc")
    # pyarrow.dataset (and the pandas it imports, about 0.4 s) waits for the first filter or SQL
    # projection: the job's driver does not pay for it
    assert probe["heavy"] == []
    # a frame in the shipped code names the module's path in the zip, and its line is read from the
    # zip's source
    source = (pathlib.Path(__file__).resolve().parents[3] / "airflow_lance/spark/job.py").read_text().splitlines()
    shipped = [(line_no, line) for name, line_no, line in probe["frames"] if name == "airflow_lance/spark/job.py"]
    assert shipped and all(line == source[line_no - 1].strip() for line_no, line in shipped), probe["frames"]


def _rewrite(code_zip: pathlib.Path, name: str, change) -> None:  # type: ignore[no-untyped-def]
    with zipfile.ZipFile(code_zip) as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    entries[name] = change(entries[name])
    with zipfile.ZipFile(code_zip, "w") as archive:
        for n, data in entries.items():
            archive.writestr(n, data)


def test_a_changed_source_or_another_pythons_bytecode_imports_the_source(tmp_path: pathlib.Path) -> None:
    code_zip = build_code_zip(tmp_path)
    _rewrite(code_zip, "airflow_lance/core/errors.py", lambda s: s + b"\nZIP_PROBE_MARKER = 'source'\n")
    probe = _probe(code_zip)
    assert (probe["marker"], probe["errors"]) == ("source", str(code_zip / "airflow_lance/core/errors.py"))
    # bytecode of another Python version (another magic number) is skipped the same way
    other = tmp_path / "other"
    other.mkdir()
    code_zip = build_code_zip(other)
    _rewrite(code_zip, "airflow_lance/core/errors.pyc", lambda c: b"\x00\x00\r\n" + c[4:])
    assert _probe(code_zip)["errors"] == str(code_zip / "airflow_lance/core/errors.py")
