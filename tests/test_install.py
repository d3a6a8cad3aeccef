"""The README's install line, run in a fresh virtualenv: the provider registers and ``spark-submit`` works.

The line is read from the README's Install section (README and test cannot drift) and the
package name in it is replaced by the path of a copy of this checkout's package sources. pip reaches PyPI through its usual
cache, so a second run takes a fraction of the first one's time (Airflow and pyspark are
large); the subprocesses have generous but finite timeouts.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.install

REPO = pathlib.Path(__file__).resolve().parents[1]
INSTALL_LINE = re.compile(r'^pip install "airflow-lance(\[[a-z0-9,]+\])?"\s*$', re.MULTILINE)


def readme_install_line() -> str:
    """The ``pip install "airflow-lance[...]"`` line of the README's Install section."""
    text = (REPO / "README.md").read_text()
    section = text.split("### Install", 1)[1].split("\n### ", 1)[0]
    found = INSTALL_LINE.findall(section)
    assert len(found) == 1, f"the README's Install section must hold one install line, found {found}"
    return INSTALL_LINE.search(section).group(0).strip()  # type: ignore[union-attr]


def test_readme_install_line_names_the_spark_extra() -> None:
    line = readme_install_line()
    extras = re.search(r"\[([a-z0-9,]+)\]", line)
    assert extras is not None and "spark" in extras.group(1).split(","), line


def test_readme_lists_exactly_the_core_dependencies_executors_need() -> None:
    """What executors need (the shipped zip imports only the core) is the base dependencies less
    Airflow's and psutil (the operator's): the README's list and pyproject.toml cannot drift."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = {d for d in project["dependencies"] if not d.startswith(("apache-airflow", "psutil"))}
    text = (REPO / "README.md").read_text()
    paragraph = text.split("**How executors get the code.**", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([a-z][a-z0-9_-]*[<>=][^`]*)`", paragraph.split("plus the dataset", 1)[0]))
    assert listed == needed


def _run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{shlex.join(argv)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n" \
                                   f"{result.stderr[-3000:]}"
    return result


def test_readme_install_line_in_a_fresh_virtualenv(tmp_path: pathlib.Path) -> None:
    line = readme_install_line()
    args = shlex.split(line)
    assert args[:2] == ["pip", "install"] and args[2].startswith("airflow-lance")
    source = tmp_path / "airflow-lance"  # a copy of what the package is built from: pip builds in it
    shutil.copytree(REPO / "airflow_lance", source / "airflow_lance", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    requirement = str(source) + args[2][len("airflow-lance"):]
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AIRFLOW", "PYTHON", "PYSPARK", "SPARK_HOME", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", AIRFLOW_HOME=str(tmp_path / "airflow"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    python = str(venv / "bin" / "python")
    start = time.monotonic()
    _run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], env, timeout=300)
    # --no-compile: pip byte-compiles every module it installs (about 40 s of CPU for Airflow and
    # PySpark here); Python compiles what it imports anyway. Nothing else differs from the line.
    _run([python, "-m", "pip", "install", "--quiet", "--no-compile", requirement, *args[3:]], env, timeout=1800)
    installed = time.monotonic() - start
    print(f"\n{line!r} installed in {installed:.0f} s")

    providers = _run([str(venv / "bin" / "airflow"), "providers", "list"], env, timeout=300)
    assert re.search(r"^airflow-lance\s", providers.stdout, re.MULTILINE), providers.stdout

    version = _run([str(venv / "bin" / "spark-submit"), "--version"], env, timeout=300)
    assert re.search(r"version 4\.2\.0", version.stdout + version.stderr), version.stderr
    check = _run([python, "-c", "import pyspark, pandas, pyarrow, google.protobuf as p; "
                  "print(pyspark.__version__, pandas.__version__, pyarrow.__version__, p.__version__)"],
                 env, timeout=120)
    print(f"pyspark, pandas, pyarrow, protobuf: {check.stdout.strip()}")
    pyspark_version, pandas_version = check.stdout.split()[:2]
    assert pyspark_version == "4.2.0" and int(pandas_version.split(".")[0]) < 3, check.stdout  # the spark extra's bounds
