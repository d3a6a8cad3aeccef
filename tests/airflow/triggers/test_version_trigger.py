"""LanceVersionTrigger run directly on an event loop: events, timeout, errors, serialisation, and
its use as an AssetWatcher event trigger (cursor kept in the asset state store across restarts)."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env

import airflow_lance.core as lance
from airflow_lance.triggers.version import LanceVersionTrigger


@pytest.fixture(autouse=True)
def lance_default(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("lance_default", conn_type="lance", host=str(tmp_path)))


@pytest.fixture
def uri(tmp_path: pathlib.Path) -> str:
    path = str(tmp_path / "ds.lance")
    lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), path)
    return path


def _append(uri: str) -> None:
    lance.write_dataset(pa.table({"id": pa.array([2], pa.int64())}), uri, mode="append")


class InMemoryAssetState:
    """The accessor the triggerer injects as ``asset_state_store`` for a single watched asset
    (``aget``/``aset``), kept in memory so a "restarted" trigger can be handed the same one."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


async def _next(events: AsyncIterator[Any], timeout: float = 20) -> Any:
    return await asyncio.wait_for(anext(events), timeout)


def test_serialize_round_trip() -> None:
    trigger = LanceVersionTrigger(uri="ds.lance", baseline_version=3, data_changes_only=True, tag=None,
                                  poll_interval=5, end_time=123.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_lance.triggers.version.LanceVersionTrigger"
    assert LanceVersionTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_fires_for_a_version_newer_than_the_baseline(uri: str) -> None:
    async def scenario() -> Any:
        events = LanceVersionTrigger(uri="ds.lance", baseline_version=1, poll_interval=0.1).run()
        pending = asyncio.ensure_future(_next(events))
        await asyncio.sleep(0.5)
        assert not pending.done()  # nothing newer than version 1 yet
        await asyncio.to_thread(_append, uri)
        return (await pending).payload

    payload = asyncio.run(scenario())
    assert payload["status"] == "success"
    assert {k: payload["info"][k] for k in ("uri", "version", "baseline_version", "operation")} == {
        "uri": uri, "version": 2, "baseline_version": 1, "operation": "append"}


def test_events_carry_the_version_range_and_row_counts(uri: str) -> None:
    """Rows inserted, updated and deleted between the baseline and the new version (stable row
    ids: an update is an update), for a downstream ``read_lance(..., since_version=baseline)``."""
    stable = uri + "-stable"
    lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([0] * 10, pa.int64())}),
                        stable, enable_stable_row_ids=True)
    lance.write_dataset(pa.table({"id": pa.array([10, 11, 12], pa.int64()), "v": pa.array([0] * 3, pa.int64())}),
                        stable, mode="append")
    lance.dataset(stable).update({"v": "1"}, where="id < 4")
    lance.dataset(stable).delete("id = 9 OR id = 12")
    payload = asyncio.run(_next(LanceVersionTrigger(uri=stable, baseline_version=1, poll_interval=0.1).run())).payload
    info = payload["info"]
    assert info["version_range"] == [1, 4]
    assert (info["rows_inserted"], info["rows_updated"], info["rows_deleted"]) == (2, 4, 1)
    assert lance.dataset(stable).count_rows() == 10 - 1 + 2


def test_times_out_at_end_time(uri: str) -> None:
    trigger = LanceVersionTrigger(uri=uri, baseline_version=1, poll_interval=0.1, end_time=time.time() + 0.5)
    payload = asyncio.run(_next(trigger.run())).payload
    assert payload["status"] == "timeout"


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"lance_conn_id": "no_such_connection"}, "AirflowNotFoundException"),
    ({"tag": "not/a valid tag"}, "InvalidInputError"),
])
def test_permanent_errors_end_with_an_error_event(uri: str, kwargs: dict[str, Any], error: str) -> None:
    payload = asyncio.run(_next(LanceVersionTrigger(uri=uri, poll_interval=0.1, **kwargs).run())).payload
    assert payload["status"] == "error" and payload["message"].startswith(error)


def test_as_a_watcher_it_keeps_firing_and_its_cursor_survives_a_restart(uri: str) -> None:
    state = InMemoryAssetState()

    async def watch(trigger: LanceVersionTrigger) -> AsyncIterator[Any]:
        trigger.asset_state_store = state  # what the triggerer injects for an AssetWatcher
        async for event in trigger.run():
            yield event

    async def scenario() -> list[int]:
        first = LanceVersionTrigger(uri=uri, data_changes_only=True, poll_interval=0.1)
        events = watch(first)
        pending = asyncio.ensure_future(_next(events))
        await asyncio.sleep(0.5)  # started at version 1: the existing version is not announced
        assert not pending.done()
        await asyncio.to_thread(_append, uri)
        seen = [(await pending).payload["info"]["version"]]
        await asyncio.to_thread(_append, uri)
        seen.append((await _next(events)).payload["info"]["version"])  # one trigger, many events
        await events.aclose()
        restarted = watch(LanceVersionTrigger(**first.serialize()[1]))  # a triggerer restart
        pending = asyncio.ensure_future(_next(restarted))
        await asyncio.sleep(0.5)
        assert not pending.done()  # version 3 was announced already
        await asyncio.to_thread(_append, uri)
        seen.append((await pending).payload["info"]["version"])
        await restarted.aclose()
        return seen

    assert asyncio.run(scenario()) == [2, 3, 4]
    assert state.values == {"lance_version": 4}
