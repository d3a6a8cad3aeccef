"""What the executors' Python needs, and checking it on the executors before a job writes anything.

The list is derived, never kept by hand: :func:`executor_requirements` reads the modules that the
shipped code (``airflow_lance/core`` and ``airflow_lance/spark``) imports, maps them to their
distributions (``importlib.metadata.packages_distributions``) and keeps airflow-lance's own
requirements of those distributions (``importlib.metadata.requires``), with their version bounds;
protobuf gets at least the runtime version the generated ``*_pb2`` modules validate. The operator
computes it where airflow-lance is installed and ships it in the code zip
(``airflow_lance/spark/executor_requirements.json``); the job reads it there
(:func:`load_requirements`) and runs :func:`probe_partition` once per core slot on the executors
(:func:`check_on_executors`).

Stdlib only: the probe must run in a Python that lacks everything it checks.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.metadata
import json
import os
import pathlib
import pkgutil
import re
import socket
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

#: The file in the code zip that carries the requirements to the job.
REQUIREMENTS_FILE = "executor_requirements.json"
#: Shipped packages whose imports define the requirements.
SHIPPED_PACKAGES = ("core", "spark")
#: Modules the cluster brings itself (Spark puts PySpark and py4j on the workers' path).
PROVIDED_BY_SPARK = frozenset({"pyspark", "py4j"})
_RUNTIME_VERSION = re.compile(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*"
                              r"(\d+),\s*(\d+),\s*(\d+),")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;(.*))?$")
_SPECIFIER = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)\s*([^\s,]+)\s*$")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(root: pathlib.Path) -> set[str]:
    """Absolute module names imported anywhere in the shipped packages under ``root``
    (``airflow_lance``'s directory), stdlib and airflow_lance itself excluded."""
    found: set[str] = set()
    for package in SHIPPED_PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in _statements(ast.parse(path.read_text(), str(path)).body):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module)
    top = {name.split(".")[0] for name in found}
    keep = top - set(sys.stdlib_module_names) - {"airflow_lance", "__future__"}
    return {name for name in found if name.split(".")[0] in keep}


def _statements(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every statement of ``body``, nested ones included (imports are statements: expressions,
    nine nodes in ten, are not visited)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _statements(children)


def protobuf_runtime_version(root: pathlib.Path) -> tuple[int, int, int] | None:
    """The highest protobuf runtime version the generated modules under ``root/core`` validate."""
    versions = [tuple(int(v) for v in match.groups())
                for path in (root / "core").rglob("*_pb2.py") for match in _RUNTIME_VERSION.finditer(path.read_text())]
    return max(versions) if versions else None  # type: ignore[return-value]


def executor_requirements(distribution: str = "airflow-lance") -> list[dict[str, Any]]:
    """What the shipped code needs on an executor: one entry per distribution,
    ``{"distribution", "specifier", "modules"}`` (``modules``: the top-most modules it imports).
    Derived once per process (it reads every shipped module and the installed distributions'
    metadata, about 2 s): the installed package does not change under a running process."""
    return json.loads(_executor_requirements(distribution))


@functools.cache
def _executor_requirements(distribution: str) -> str:
    import airflow_lance

    root = pathlib.Path(airflow_lance.__file__).resolve().parent
    modules = imported_modules(root)
    owners = importlib.metadata.packages_distributions()
    requirements: dict[str, str] = {}
    for line in importlib.metadata.requires(distribution) or []:
        match = _REQUIREMENT.match(line)
        if match and not (match.group(3) or "").strip():  # unconditional: no extra, no marker
            requirements[_normalize(match.group(1))] = match.group(2).replace(" ", "")
    by_distribution: dict[str, set[str]] = {}
    for module in modules:
        top = module.split(".")[0]
        if top in PROVIDED_BY_SPARK:
            continue
        for owner in _owners(module, owners.get(top, [])):
            if _normalize(owner) in requirements:
                by_distribution.setdefault(_normalize(owner), set()).add(module)
    runtime = protobuf_runtime_version(root)
    entries = []
    for name, found in sorted(by_distribution.items()):
        specifier = requirements[name]
        if name == "protobuf" and runtime is not None and ">=" + ".".join(map(str, runtime)) not in specifier:
            specifier = ",".join(filter(None, [specifier, ">=" + ".".join(map(str, runtime))]))
        tops = sorted(m for m in found if not any(m.startswith(o + ".") for o in found if o != m))
        entries.append({"distribution": name, "specifier": specifier, "modules": tops})
    return json.dumps(entries)


def _owners(module: str, candidates: Sequence[str]) -> list[str]:
    """The distributions among ``candidates`` that hold ``module`` (for namespace packages such
    as ``google``, shared by protobuf and google-auth, the one holding its second level)."""
    if len(candidates) <= 1 or "." not in module:
        return list(candidates)
    prefix = "/".join(module.split(".")[:2])
    return [name for name in candidates
            if any(str(f).startswith((prefix + "/", prefix + ".py")) for f in importlib.metadata.files(name) or [])]


def load_requirements() -> list[dict[str, Any]] | None:
    """The requirements shipped in the code zip (None when the job runs from an installed package
    without them)."""
    with contextlib.suppress(OSError, ValueError):
        data = pkgutil.get_data("airflow_lance.spark", REQUIREMENTS_FILE)
        if data is not None:
            return list(json.loads(data))
    return None


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets ``specifier`` (``>=1.2,<2``; release numbers only, as PEP 440
    orders them; ``==1.2.*`` prefixes and ``~=`` too)."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        match = _SPECIFIER.match(clause)
        if not match:
            continue
        op, text = match.groups()
        if text.endswith(".*"):
            prefix = _release(text[:-2])
            equal = have[: len(prefix)] == prefix
            if equal != (op == "=="):
                return False
            continue
        want = _release(text)
        cmp = _compare(have, want)
        ok = {"==": cmp == 0, "===": version.strip() == text, "!=": cmp != 0, ">=": cmp >= 0, "<=": cmp <= 0,
              ">": cmp > 0, "<": cmp < 0,
              "~=": cmp >= 0 and have[: max(len(want) - 1, 1)] == want[: max(len(want) - 1, 1)]}[op]
        if not ok:
            return False
    return True


def check_requirements(requirements: Iterable[Mapping[str, Any]]) -> list[str]:
    """Problems of this Python with ``requirements``: ``name: not installed``, ``name 1.0 (needs
    >=2)`` or ``name: import failed (...)``; empty when all is well. A package without
    metadata that imports (shipped with ``--py-files``, say) passes, its version unknown."""
    problems = []
    for requirement in requirements:
        name, specifier = requirement["distribution"], requirement.get("specifier", "")
        try:
            version: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # no metadata: it may still import (e.g. from --py-files)
            version = None
        if version is not None and specifier and not satisfies(version, specifier):
            problems.append(f"{name} {version} (needs {name}{specifier})")
            continue
        for module in requirement.get("modules", ()):
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - any import failure is the finding
                problems.append(f"{name}: not installed (needs {name}{specifier})" if version is None else
                                f"{name}: import {module} failed ({type(exc).__name__}: {exc})")
                break
    return problems


def probe_partition(requirements: Sequence[Mapping[str, Any]], _rows: Iterator[Any] | None = None) -> Iterator[dict]:
    """Executor side: this Python's problems with ``requirements`` (one dict; never raises)."""
    yield {"host": socket.gethostname(), "python": sys.executable, "cwd": os.getcwd(),
           "problems": check_requirements(requirements)}


def executor_problems(reports: Iterable[Mapping[str, Any]]) -> str | None:
    """One line naming every problem the executors reported, None when there is none."""
    seen: dict[str, list[str]] = {}
    for report in reports:
        for problem in report["problems"]:
            where = f"{report['python']} on {report['host']}"
            if where not in seen.setdefault(problem, []):
                seen[problem].append(where)
    if not seen:
        return None
    pythons = sorted({where for places in seen.values() for where in places})
    return (f"the executors' Python lacks what the job needs: {'; '.join(seen)} (Python: {', '.join(pythons)}); "
            "nothing was written. Install these there, or ship a packed environment with the operator's "
            "python_env_archive (README: Running on a cluster)")


def check_on_executors(spark: Any, requirements: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Run the probe in one task per core slot; the executors' reports (see :func:`probe_partition`)."""
    import functools

    from airflow_lance.spark.distributed import default_parallelism, is_connect, map_task_partitions

    slots = default_parallelism(spark)
    probe = functools.partial(probe_partition, list(requirements))
    if is_connect(spark):  # no RDDs: mapInArrow (Spark Connect's Python workers have pyarrow)
        return list(map_task_partitions(spark, range(slots), probe))
    # an RDD needs nothing but Python on the executors: the check reports a missing pyarrow too
    return list(spark.sparkContext.parallelize(range(slots), slots).mapPartitions(probe).collect())
