"""Layering: the core imports neither Airflow nor Spark; the package root stays light."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE = ROOT / "airflow_lance" / "core"
FORBIDDEN_IN_CORE = ("airflow", "pyspark", "airflow_lance.hooks", "airflow_lance.operators",
                     "airflow_lance.sensors", "airflow_lance.triggers", "airflow_lance.spark")


def _forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN_IN_CORE)


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_source_never_imports_airflow_or_spark():
    offenders = {
        str(path.relative_to(ROOT)): sorted(n for n in _imports(path) if _forbidden(n))
        for path in CORE.rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_core_loads_no_airflow_or_spark():
    code = (
        "import sys, airflow_lance.core; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_works_with_airflow_and_spark_unimportable(tmp_path):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('airflow', 'pyspark'):\n"
        "            raise ImportError(f'{name} is blocked')\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    code = (
        "import pyarrow as pa, airflow_lance.core as core, sys; "
        f"ds = core.write_dataset(pa.table({{'a': [1, 2]}}), {str(tmp_path / 'ds')!r}); "
        "assert ds.to_table().num_rows == 2"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
