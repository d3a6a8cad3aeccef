"""Helpers of the provider tests: loading and running DAGs, reading their results from the
metadata database, connections as ``AIRFLOW_CONN_*`` JSON, and a recording ``spark-submit``."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

DAGS_FOLDER = pathlib.Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])


def connection_env(conn_id: str, **fields: Any) -> tuple[str, str]:
    """The ``AIRFLOW_CONN_<ID>`` variable (name, JSON value) of a connection."""
    return f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields)


@contextlib.contextmanager
def task_logs_to(path: pathlib.Path) -> Iterator[None]:
    """Send what ``dag.test()`` prints (the task logs, Airflow writes them to standard output)
    to ``path``: file descriptor 1 and ``sys.stdout`` both, whatever pytest captures."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "w") as handle:
        os.dup2(handle.fileno(), 1)
        try:
            with contextlib.redirect_stdout(handle):
                yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def whole_and_short_dags(dag_id: str, tasks: Callable[[bool], list[Any]]) -> dict[str, Any]:
    """Two DAGs running ``tasks(short)`` one after another: ``dag_id`` the whole list (``make
    stress``), ``<dag_id>_short`` the short one (``make test``). ``tasks`` makes only the operators of
    its list: an operator made in a DAG's context is one of its tasks."""
    import datetime as dt

    from airflow.providers.common.compat.sdk import DAG

    dags = {}
    for name, short in ((dag_id, False), (f"{dag_id}_short", True)):
        with DAG(name, schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
            chain = tasks(short)
            for upstream, downstream in zip(chain, chain[1:]):
                upstream >> downstream
        dags[name] = dag
    return dags


def load_dag(file_name: str, dag_id: str) -> Any:
    """Import a DAG file of the DAGs folder under a fresh module name; return its DAG."""
    path = DAGS_FOLDER / file_name
    spec = importlib.util.spec_from_file_location(f"_dag_{path.stem}_{id(path)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return next(v for v in vars(module).values() if getattr(v, "dag_id", None) == dag_id and hasattr(v, "test"))


def task_instances(dag_run: Any) -> dict[str, Any]:
    """Task id -> task instance of a finished run."""
    return {ti.task_id: ti for ti in dag_run.get_task_instances()}


def xcom_value(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """The XCom a task of ``dag_run`` pushed (None if none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(
            XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id, task_ids=task_id, key=key)
        ).first()
        return XComModel.deserialize_value(row) if row is not None else None


def asset_events(asset_uri: str) -> list[dict[str, Any]]:
    """Extras of the events of an asset, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        return list(session.scalars(query.where(AssetModel.uri == asset_uri).order_by(AssetEvent.id)))


def rendered_fields(dag_run: Any) -> dict[str, Any]:
    """Task id -> rendered template fields stored for the run."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(RTIF.task_id, RTIF.rendered_fields).where(RTIF.run_id == dag_run.run_id))
        return {task_id: fields for task_id, fields in rows}


class SparkSubmitSpy:
    """A ``spark-submit`` first on the PATH that records each command line and the output (all
    calls' in ``output``, each call's in ``output-<pid>``), then execs the real one (same
    process, so exit status and kills behave as usual)."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        real = shutil.which("spark-submit")
        assert real is not None, "spark-submit is not on the PATH"
        script = folder / "spark-submit"
        script.write_text(
            "#!/usr/bin/env bash\n"
            f'printf "%s\\n" "$@" > "{folder}/argv-$$-$RANDOM"\n'
            f'exec > >(tee -a "{folder}/output" "{folder}/output-$$") 2>&1\n'
            f'exec "{real}" "$@"\n'
        )
        script.chmod(0o755)

    def calls(self) -> list[list[str]]:
        return [p.read_text().splitlines() for p in sorted(self.folder.glob("argv-*"))]

    def runs(self) -> list[tuple[int, list[str], str]]:
        """``(pid, command line, output)`` of each call, in the order they started."""
        runs = []
        for argv in sorted(self.folder.glob("argv-*"), key=lambda p: p.stat().st_mtime_ns):
            pid = int(argv.name.split("-")[1])
            output = self.folder / f"output-{pid}"
            runs.append((pid, argv.read_text().splitlines(),
                         output.read_text(errors="replace") if output.exists() else ""))
        return runs

    def output(self) -> str:
        path = self.folder / "output"
        return path.read_text(errors="replace") if path.exists() else ""
