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


# -- the provider around the core -------------------------------------------------------------
PROVIDER_PACKAGES = ("hooks", "operators", "sensors", "triggers")
ALLOWED_SPARK_MODULES = {"airflow_lance.spark.spec", "airflow_lance.spark.task_spec",
                         "airflow_lance.spark.merge_insert_spec",
                         "airflow_lance.spark.environment"}  # what the job checks on its executors

_AIRFLOW_BLOCKER = (
    "import sys\n"
    "class _Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'airflow':\n"
    "            raise ImportError(f'{name} is blocked')\n"
    "sys.meta_path.insert(0, _Block())\n"
)


def _core_public_names() -> set[str]:
    import airflow_lance.core

    return set(airflow_lance.core.__all__)


def _core_uses(path: pathlib.Path) -> list[str]:
    """Every way ``path`` reaches into airflow_lance.core / airflow_lance.spark that is not allowed."""
    public = _core_public_names()
    tree = ast.parse(path.read_text(), str(path))
    aliases: set[str] = set()
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "airflow_lance.core":
                    aliases.add(alias.asname or alias.name)
                elif alias.name.startswith(("airflow_lance.core.", "airflow_lance.spark")):
                    bad.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "airflow_lance.core":
                bad += [f"from airflow_lance.core import {a.name}" for a in node.names if a.name not in public]
            elif node.module.startswith("airflow_lance.core.") or (
                node.module.startswith("airflow_lance.spark") and node.module not in ALLOWED_SPARK_MODULES
            ):
                bad.append(f"from {node.module} import ...")
            elif node.module == "airflow_lance" and any(a.name in ("core", "spark") for a in node.names):
                bad.append("from airflow_lance import core/spark")
    for node in ast.walk(tree):
        is_core_attribute = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
            node.value.id in aliases
        )
        if is_core_attribute and node.attr not in public:
            bad.append(f"{node.value.id}.{node.attr}")
    return bad


def test_provider_modules_use_only_the_public_core_and_the_job_spec():
    offenders = {}
    for package in PROVIDER_PACKAGES:
        for path in (ROOT / "airflow_lance" / package).rglob("*.py"):
            if bad := _core_uses(path):
                offenders[str(path.relative_to(ROOT))] = bad
    assert not offenders


def test_the_layering_check_catches_a_private_core_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import airflow_lance.core as lance\n"
        "from airflow_lance.core.manifest import read_manifest\n"
        "from airflow_lance.spark.writer import write_partition\n"
        "lance.dataset\nlance._open_version\n"
    )
    assert sorted(_core_uses(sample)) == sorted([
        "from airflow_lance.core.manifest import ...", "from airflow_lance.spark.writer import ...",
        "lance._open_version",
    ])


def test_spark_job_imports_with_airflow_unimportable(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(_AIRFLOW_BLOCKER)
    code = (
        "import sys, airflow_lance.spark.job, airflow_lance.spark.writer, airflow_lance.spark.spec; "
        "assert 'airflow' not in sys.modules; print('ok')"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                            check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_provider_info_and_package_root_load_no_airflow():
    code = (
        "import sys, airflow_lance, airflow_lance.get_provider_info as g; info = g.get_provider_info(); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark')]; "
        "print(bad); sys.exit(1 if bad or info['package-name'] != 'airflow-lance' else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
