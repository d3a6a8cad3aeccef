"""``LanceVersionSensor``: wait for a new version of a Lance dataset, or for a tag.

Works in ``poke`` and ``reschedule`` mode and deferred (``deferrable=True``, through
:class:`~airflow_lance.triggers.version.LanceVersionTrigger`). Returns (and pushes to
XCom) the version info: ``uri``, ``version``, ``baseline_version``, ``operation``,
``timestamp`` (and ``tag`` / ``data_version`` / ``recreated`` where they apply). With a
baseline, also ``version_range`` ``[baseline, version]`` and ``rows_inserted``,
``rows_updated`` and ``rows_deleted`` between the two (``airflow_lance.core.changes``;
``changes_error`` instead when versions in between were cleaned up): a downstream task reads
just those rows with ``read_lance(spark, uri, version=info["version"],
since_version=info["baseline_version"])``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowSensorTimeout,
    BaseSensorOperator,
    PokeReturnValue,
    conf,
)

from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators._lineage import LanceLineageMixin, lance_dataset
from airflow_lance.triggers.version import LanceVersionTrigger

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: ``task_state_store`` key remembering the version seen at the first poke (Airflow 3.3+).
BASELINE_KEY = "lance_baseline_version"


def _as_version(value: Any) -> int:
    try:
        version = int(str(value).strip())
    except ValueError:
        raise ValueError(f"baseline_version must be a version number, not {value!r}") from None
    if version < 0:
        raise ValueError(f"baseline_version must not be negative, not {version}")
    return version


class LanceVersionSensor(LanceLineageMixin, BaseSensorOperator):
    """Wait until a Lance dataset has a version newer than a baseline, or until a tag exists.

    :param uri: dataset URI, path, asset URI or name below the connection's root. (templated)
    :param lance_conn_id: the ``lance`` connection.
    :param baseline_version: wait for a version newer than this, e.g.
        ``"{{ ti.xcom_pull(task_ids='write')['version'] }}"``. Default: the version at the
        first poke (remembered across reschedules and retries in the task state store on
        Airflow 3.3+; before 3.3, reschedule mode needs an explicit baseline). (templated)
    :param data_changes_only: count only versions made by data-changing operations
        (appends, overwrites, deletes, updates, ...), not compaction's ``rewrite``,
        index or config changes.
    :param tag: wait until this tag exists instead (the baseline is ignored). (templated)
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).

    ``mode``, ``poke_interval`` and ``timeout`` are the usual sensor arguments.
    """

    template_fields: Sequence[str] = ("uri", "baseline_version", "tag")
    ui_color = "#e4f0e8"

    def __init__(
        self,
        *,
        uri: str,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        baseline_version: int | str | None = None,
        data_changes_only: bool = False,
        tag: str | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.uri = uri
        self.lance_conn_id = lance_conn_id
        self.baseline_version = baseline_version
        self.data_changes_only = data_changes_only
        self.tag = tag
        if deferrable is None:
            deferrable = conf.getboolean("operators", "default_deferrable", fallback=False)
        self.deferrable = deferrable
        self._baseline: int | None = None

    @cached_property
    def hook(self) -> LanceHook:
        """The Lance hook (created on first use, never at DAG parse time)."""
        return LanceHook(self.lance_conn_id)

    def _resolve_baseline(self, context: Context) -> int | None:
        if self.tag is not None:
            return None
        if self.baseline_version not in (None, ""):
            return _as_version(self.baseline_version)
        store = context.get("task_state_store")
        if store is not None:
            stored = store.get(BASELINE_KEY)
            if stored is not None:
                return _as_version(stored)
        elif self.mode == "reschedule":
            raise AirflowException(
                "LanceVersionSensor in reschedule mode needs baseline_version before Airflow 3.3 "
                "(there is no task state store to remember the version at the first poke)"
            )
        baseline = self.hook.latest_version(self.uri) or 0
        if store is not None:
            store.set(BASELINE_KEY, baseline)
        return baseline

    def _check(self) -> dict[str, Any] | None:
        return self._found(self.hook.check_version(
            self.uri, baseline_version=self._baseline, data_changes_only=self.data_changes_only, tag=self.tag
        ))

    def _found(self, info: dict[str, Any] | None) -> dict[str, Any] | None:
        """Record the version found as the lineage input; return ``info``."""
        if info is not None:
            self.record_lineage(inputs=[lance_dataset(info["uri"], info["version"],
                                                      storage_options=self.hook.storage_options)])
        return info

    def execute(self, context: Context) -> Any:
        self._baseline = self._resolve_baseline(context)
        if self.tag is not None:
            self.log.info("Waiting for tag %r of %s", self.tag, self.uri)
        else:
            self.log.info("Waiting for a version of %s newer than %s%s", self.uri, self._baseline,
                          " (data changes only)" if self.data_changes_only else "")
        if not self.deferrable:
            return super().execute(context)
        info = self._check()
        if info is not None:
            return info
        timeout = float(self.timeout)
        self.defer(
            trigger=LanceVersionTrigger(
                uri=self.hook.resolve_uri(self.uri),
                lance_conn_id=self.lance_conn_id,
                baseline_version=self._baseline,
                data_changes_only=self.data_changes_only,
                tag=self.tag,
                poll_interval=float(self.poke_interval),
                end_time=time.time() + timeout,
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        info = self._check()
        if info is not None:
            self.log.info("Found version %d of %s", info["version"], info["uri"])
        return PokeReturnValue(is_done=info is not None, xcom_value=info)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: return the version info, or fail."""
        status = event.get("status")
        if status == "success":
            self.log.info("Found version %d of %s", event["info"]["version"], event["info"]["uri"])
            return self._found(event["info"])
        if status == "timeout":
            raise AirflowSensorTimeout(event.get("message", "timed out"))
        raise AirflowException(f"LanceVersionSensor failed: {event.get('message', event)}")
