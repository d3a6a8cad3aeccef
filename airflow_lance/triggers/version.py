"""``LanceVersionTrigger``: fires when a Lance dataset gets a new version (or a tag appears).

Two uses:

* **Deferrable sensor** (``LanceVersionSensor(deferrable=True)``): given the baseline,
  it yields one event and returns; ``end_time`` bounds the wait (a ``timeout`` event).
* **Event trigger of an** ``AssetWatcher``: a DAG scheduled on
  ``create_asset(uri=..., watchers=[AssetWatcher(name=..., trigger=LanceVersionTrigger(uri=...))])``
  runs for new versions. It keeps yielding one event per observed new version. The
  cursor (last announced version) is kept in the asset's state store where Airflow
  provides one (3.3+), so a restarted triggerer neither repeats nor misses versions;
  without a store it starts from ``baseline_version`` or the version current at start.

Events report the *observed* latest version, not every intermediate commit: consumers
needing a pinned read open ``dataset(uri, version=info["version"])``. The info carries the
version range and the rows inserted, updated and deleted since the baseline (see
:mod:`airflow_lance.sensors.version`), so a consumer reads only those rows with
``read_lance(..., since_version=info["baseline_version"])``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.common.compat.sdk import AirflowNotFoundException
from airflow.providers.common.compat.triggers import BaseEventTrigger
from airflow.triggers.base import TriggerEvent

import airflow_lance.core as lance
from airflow_lance.connection import DEFAULT_CONN_ID, LanceConnectionError
from airflow_lance.hooks.lance import LanceHook

#: Errors that polling again cannot fix.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    lance.CorruptFileError,
    lance.UnsupportedFeatureError,
    lance.InvalidInputError,
    LanceConnectionError,
)
#: ... and, when starting, a connection that does not exist.
STARTUP_ERRORS: tuple[type[BaseException], ...] = (*PERMANENT_ERRORS, AirflowNotFoundException)


class LanceVersionTrigger(BaseEventTrigger):
    """Poll a Lance dataset until it has a version newer than ``baseline_version``.

    :param uri: dataset URI, path, asset URI or name below the connection's root.
    :param lance_conn_id: the ``lance`` connection (None: no connection).
    :param baseline_version: fire for versions newer than this; None: the version current
        when the trigger starts (0 when the dataset does not exist yet).
    :param data_changes_only: only versions made by data-changing operations count
        (compaction's ``rewrite``, index and config changes do not).
    :param tag: instead, fire when this tag exists (and points at a version other
        than ``baseline_version``).
    :param poll_interval: seconds between polls.
    :param end_time: epoch seconds after which a ``timeout`` event ends the wait.
    """

    def __init__(
        self,
        *,
        uri: str,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        baseline_version: int | None = None,
        data_changes_only: bool = False,
        tag: str | None = None,
        poll_interval: float = 60.0,
        end_time: float | None = None,
    ) -> None:
        super().__init__()
        self.uri = uri
        self.lance_conn_id = lance_conn_id
        self.baseline_version = baseline_version
        self.data_changes_only = data_changes_only
        self.tag = tag
        self.poll_interval = poll_interval
        self.end_time = end_time

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "uri": self.uri,
                "lance_conn_id": self.lance_conn_id,
                "baseline_version": self.baseline_version,
                "data_changes_only": self.data_changes_only,
                "tag": self.tag,
                "poll_interval": self.poll_interval,
                "end_time": self.end_time,
            },
        )

    @property
    def _cursor_key(self) -> str:
        return f"lance_tag:{self.tag}" if self.tag is not None else "lance_version"

    async def _hook(self) -> LanceHook:
        if not self.lance_conn_id:
            return LanceHook.from_connection(None)
        getter = getattr(LanceHook, "aget_connection", None)
        if getter is not None:
            conn = await getter(self.lance_conn_id)
        else:  # Airflow 2: no async connection lookup
            conn = await asyncio.to_thread(LanceHook.get_connection, self.lance_conn_id)
        return LanceHook.from_connection(conn)

    async def _stored_cursor(self) -> int | None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            value = await store.aget(self._cursor_key)
        except ValueError as exc:  # one trigger serving several assets: no single cursor
            self.log.warning("Not persisting the version cursor: %s", exc)
            return None
        return int(value) if value is not None else None

    async def _save_cursor(self, version: int) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is not None:
            try:
                await store.aset(self._cursor_key, version)
            except ValueError as exc:
                self.log.warning("Not persisting the version cursor: %s", exc)

    async def _start_cursor(self, hook: LanceHook) -> int | None:
        stored = await self._stored_cursor()
        if stored is not None:
            return stored
        if self.baseline_version is not None or self.tag is not None:
            return self.baseline_version
        return await asyncio.to_thread(lambda: hook.latest_version(self.uri) or 0)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            hook = await self._hook()
            uri = hook.resolve_uri(self.uri)
            cursor = await self._start_cursor(hook)
        except STARTUP_ERRORS as exc:
            yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
            return
        self.log.info("Watching %s for a version after %s", uri, cursor)
        while True:
            try:
                info = await asyncio.to_thread(
                    hook.check_version, uri, baseline_version=cursor, data_changes_only=self.data_changes_only,
                    tag=self.tag,
                )
            except PERMANENT_ERRORS as exc:
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            except (lance.LanceError, OSError) as exc:  # storage hiccup: poll again
                self.log.warning("Polling %s failed, retrying: %s: %s", uri, type(exc).__name__, exc)
                info = None
            if info is not None:
                await self._save_cursor(info["version"])
                yield TriggerEvent({"status": "success", "info": info})
                if self.task_instance is not None:  # a deferred task: one event
                    return
                cursor = info["version"]
            elif self.end_time is not None and time.time() >= self.end_time:
                yield TriggerEvent({"status": "timeout", "message": f"no new version of {uri} before the timeout"})
                return
            await asyncio.sleep(self.poll_interval)
