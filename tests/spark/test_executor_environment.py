"""What the executors' Python needs (airflow_lance.spark.environment): derived from the package's
metadata and imports, shipped in the code zip, checked in a real Python that lacks packages, and
versions compared as PEP 440 orders them (``packaging`` as the oracle)."""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import subprocess
import sys
import zipfile

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import airflow_lance
from airflow_lance.operators._spark_code import build_code_zip
from airflow_lance.spark import environment
from airflow_lance.spark.pack_env import pinned_requirements

ROOT = pathlib.Path(airflow_lance.__file__).resolve().parent


def test_requirements_are_the_packages_the_shipped_code_imports_with_the_package_bounds() -> None:
    found = {r["distribution"]: r for r in environment.executor_requirements()}
    # numpy, msgpack, zstandard and sqlglot were missing from the README's first list
    assert {"pyarrow", "numpy", "protobuf", "pyroaring", "fsspec", "sqlglot", "msgpack", "zstandard"} <= set(found)
    declared = {}
    for line in importlib.metadata.requires("airflow-lance") or []:
        if ";" not in line:
            name = line.split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0].strip()
            declared[name.lower()] = line[len(name):].replace(" ", "")
    for name, entry in found.items():
        assert SpecifierSet(declared[name]) == SpecifierSet(entry["specifier"]) or name == "protobuf", name
    # protobuf: at least the runtime version the generated modules validate
    runtime = environment.protobuf_runtime_version(ROOT)
    assert runtime is not None
    runtime_version = ".".join(map(str, runtime))
    assert f">={runtime_version}" in found["protobuf"]["specifier"].split(",")
    assert Version(runtime_version) in SpecifierSet(found["protobuf"]["specifier"])
    assert found["protobuf"]["modules"] == ["google.protobuf"]  # not google-auth's google.oauth2
    # nothing Airflow, nothing only an optional store backend brings
    assert not {"apache-airflow", "psutil", "s3fs", "adlfs", "gcsfs", "pyspark"} & set(found)
    # every import of the shipped code is the stdlib, PySpark, a requirement, a lazily imported store
    # backend or numba and its llvmlite (the ``fast`` extra's compiled decode loops, imported when first needed)
    optional = {"adlfs", "azure", "botocore", "gcsfs", "s3fs", "google", "numba", "llvmlite"}
    modules = {m.split(".")[0] for m in environment.imported_modules(ROOT)}
    required = {m.split(".")[0] for r in found.values() for m in r["modules"]}
    assert modules - required - optional - environment.PROVIDED_BY_SPARK == set()


@pytest.mark.parametrize("specifier", [">=1.26", "<2,>=1.2.4", ">=7.35.1,<8", "==2.0.*", "~=1.2", "~=1.2.3",
                                       "!=1.3", ">1.2", "<=1.2", "==1.2"])
def test_version_comparison_agrees_with_packaging(specifier: str) -> None:
    for version in ["1.1", "1.2", "1.2.0", "1.2.3", "1.2.4", "1.3", "1.26", "1.26.1", "2.0", "2.0.1", "2.1",
                    "7.35.0", "7.35.1", "7.36.2", "8.0"]:
        assert environment.satisfies(version, specifier) == (Version(version) in SpecifierSet(specifier)), (
            version, specifier)


def test_the_code_zip_carries_the_requirements_and_a_python_lacking_packages_names_them(
        tmp_path: pathlib.Path) -> None:
    code = build_code_zip(tmp_path)
    with zipfile.ZipFile(code) as archive:
        shipped = json.loads(archive.read("airflow_lance/spark/executor_requirements.json"))
    assert shipped == environment.executor_requirements()
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    probe = ("import json; from airflow_lance.spark import environment as e; "
             "print(json.dumps(e.check_requirements(e.load_requirements())))")
    result = subprocess.run([str(venv / "bin" / "python"), "-c", probe], env={"PYTHONPATH": str(code)}, cwd=tmp_path,
                            capture_output=True, text=True, check=True)  # the probe itself needs only the stdlib
    problems = json.loads(result.stdout)
    assert sorted(p.split(":")[0] for p in problems) == sorted(r["distribution"] for r in shipped)
    assert "numpy: not installed (needs numpy>=1.26)" in problems
    here = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(code)}, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert json.loads(here.stdout) == []


def test_a_too_old_version_is_named() -> None:
    problems = environment.check_requirements([{"distribution": "numpy", "specifier": ">=999", "modules": ["numpy"]}])
    assert problems == [f"numpy {importlib.metadata.version('numpy')} (needs numpy>=999)"]
    reports = [{"host": "h", "python": "/p", "cwd": "/", "problems": problems}] * 2
    message = environment.executor_problems(reports)
    assert message is not None and message.count("numpy") == 1 + 1 and "/p on h" in message
    assert environment.executor_problems([{"host": "h", "python": "/p", "cwd": "/", "problems": []}]) is None


def test_pack_env_pins_what_is_installed_here() -> None:
    pins = pinned_requirements()
    assert f"numpy=={importlib.metadata.version('numpy')}" in pins
    assert {p.split("==")[0] for p in pins} == {r["distribution"] for r in environment.executor_requirements()}


def test_a_module_without_metadata_that_imports_passes(tmp_path: pathlib.Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plainmod.py").write_text("X = 1\n")  # importable, no distribution metadata (as from --py-files)
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = {"distribution": "plainmod", "specifier": ">=1", "modules": ["plainmod"]}
    assert environment.check_requirements([plain]) == []
    assert environment.check_requirements([{"distribution": "nomod", "specifier": ">=1", "modules": ["nomod"]}]) == [
        "nomod: not installed (needs nomod>=1)"]
