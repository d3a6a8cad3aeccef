"""Automatic cleanup of old versions, as Lance's ``auto_cleanup_hook``.

A dataset whose config holds ``lance.auto_cleanup.interval`` (an integer) is cleaned after
every commit whose new version is a multiple of it. The policy comes from the config too:
``lance.auto_cleanup.older_than`` (a humantime duration such as ``"14days"`` or
``"1day 1h 1m 1s"``) and ``lance.auto_cleanup.retain_versions``; with neither, every version
older than the commit's base is old. As in Lance the cleanup runs from the version the
commit was built on (so that version and the new one always stay), tagged old versions make
it stop without deleting anything, and a failure is logged, never raised: the commit stands.

``write_dataset(..., auto_cleanup_options={"interval": n, "older_than_seconds": s})`` sets
both keys when it creates a dataset (pylance's rule: never on an existing one).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_lance.core.errors import InvalidInputError

if TYPE_CHECKING:
    from airflow_lance.core.cleanup import CleanupStats
    from airflow_lance.core.manifest import ManifestFile
    from airflow_lance.core.storage import ObjectStore

log = logging.getLogger(__name__)

INTERVAL_KEY = "lance.auto_cleanup.interval"
OLDER_THAN_KEY = "lance.auto_cleanup.older_than"
RETAIN_VERSIONS_KEY = "lance.auto_cleanup.retain_versions"

# humantime's units, in nanoseconds (a month is 30.44 days, a year 365.25 days).
_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
       "d": 86400 * 10**9, "w": 7 * 86400 * 10**9, "M": 2_630_016 * 10**9, "y": 31_557_600 * 10**9}
_UNITS = {
    **dict.fromkeys(("nanos", "nsec", "ns"), "ns"),
    **dict.fromkeys(("usec", "us", "\u00b5s"), "us"),
    **dict.fromkeys(("millis", "msec", "ms"), "ms"),
    **dict.fromkeys(("seconds", "second", "sec", "s"), "s"),
    **dict.fromkeys(("minutes", "minute", "min", "m"), "m"),
    **dict.fromkeys(("hours", "hour", "hr", "h"), "h"),
    **dict.fromkeys(("days", "day", "d"), "d"),
    **dict.fromkeys(("weeks", "week", "w"), "w"),
    **dict.fromkeys(("months", "month", "M"), "M"),
    **dict.fromkeys(("years", "year", "y"), "y"),
}
_TOKEN = re.compile(r"\s*(\d+)\s*([A-Za-z\u00b5]+)")


def parse_duration(text: str) -> dt.timedelta:
    """humantime's ``parse_duration`` (``"14days"``, ``"1h 30m"``, ``"0s"``)."""
    pos, total, stripped = 0, 0, text.strip()
    if not stripped:
        raise InvalidInputError(f"empty duration {text!r}")
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        unit = _UNITS.get(match.group(2)) if match else None
        if match is None or unit is None:
            raise InvalidInputError(f"cannot parse duration {text!r} (e.g. '14days', '1h 30m')")
        total += int(match.group(1)) * _NS[unit]
        pos = match.end()
    return dt.timedelta(microseconds=total // 1000)


def format_duration(seconds: int) -> str:
    """humantime's ``format_duration`` of whole seconds (``1209600`` -> ``"14days"``)."""
    if seconds == 0:
        return "0s"
    years, rest = divmod(seconds, 31_557_600)
    months, rest = divmod(rest, 2_630_016)
    days, rest = divmod(rest, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    for value, name, plural in ((years, "year", True), (months, "month", True), (days, "day", True),
                                (hours, "h", False), (minutes, "m", False), (secs, "s", False)):
        if value:
            parts.append(f"{value}{name}{'s' if plural and value > 1 else ''}")
    return " ".join(parts)


def config_values(options: Mapping[str, int]) -> dict[str, str]:
    """The config keys ``auto_cleanup_options`` (pylance's ``AutoCleanupConfig``) set."""
    if not isinstance(options, Mapping) or set(options) != {"interval", "older_than_seconds"}:
        raise InvalidInputError(
            "auto_cleanup_options must be a dict with exactly 'interval' and 'older_than_seconds'")
    interval, older = options["interval"], options["older_than_seconds"]
    for name, value in (("interval", interval), ("older_than_seconds", older)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"auto_cleanup_options[{name!r}] must be a non-negative integer, not {value!r}")
    return {INTERVAL_KEY: str(interval), OLDER_THAN_KEY: format_duration(older)}


def after_commit(store: ObjectStore, committed: ManifestFile, base: ManifestFile | None) -> CleanupStats | None:
    """Run the dataset's automatic cleanup if ``committed`` is due one; never raises."""
    config = committed.manifest.config
    if INTERVAL_KEY not in config or base is None:
        return None
    try:
        interval = int(config[INTERVAL_KEY])
        if interval <= 0:
            raise ValueError("must be positive")
        if committed.manifest.version % interval:
            return None
        older_than = parse_duration(config[OLDER_THAN_KEY]) if OLDER_THAN_KEY in config else None
        retain = int(config[RETAIN_VERSIONS_KEY]) if RETAIN_VERSIONS_KEY in config else None
        if older_than is None and retain is None:
            older_than = dt.timedelta(0)  # Lance's policy without limits: every older version
        from airflow_lance.core.cleanup import cleanup_old_versions
        from airflow_lance.core.dataset import LanceDataset

        stats = cleanup_old_versions(LanceDataset(store, base), older_than=older_than, retain_versions=retain)
    except Exception as exc:  # noqa: BLE001 - Lance logs the error; the commit stands
        log.error("automatic cleanup of %s after version %d failed: %s", store.uri, committed.manifest.version, exc)
        return None
    log.info("automatic cleanup of %s after version %d: %s", store.uri, committed.manifest.version, stats)
    return stats
