"""Does a cleanup policy outlast the retries of the writers it could race?

A retried write finds its landed commit by its idempotency key only while that
version still exists. ``cleanup_old_versions`` removes a version when it is old
by *every* limit given: with ``retain_versions`` alone, a version committed a
second ago goes as soon as enough newer versions exist; with ``older_than``,
every version younger than it stays. So a write is protected when ``older_than``
is at least its retry window.

Only writers in the cleanup task's own DAG are known here. One whose retries
always end before the cleanup runs (it is upstream of the cleanup and the DAG
allows one active run) cannot be raced; for every other writer with retries,
the cleanup warns when its policy can remove a version younger than the
writer's retry window (the sum of the longest delays Airflow may wait between
its tries). The default policy (14 days) never warns. Writers in other DAGs are
not seen: give the cleanup an ``older_than`` of at least their retry window.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any


def retry_window(task: Any) -> dt.timedelta:
    """The longest time Airflow may wait between the first and the last try of ``task`` (zero without retries).

    Exponential backoff waits between ``retry_delay * multiplier**(n - 1)`` and twice that
    before try ``n + 1``, at most ``max_retry_delay``.
    """
    retries = int(getattr(task, "retries", 0) or 0)
    delay = getattr(task, "retry_delay", dt.timedelta(0))
    if not isinstance(delay, dt.timedelta):
        delay = dt.timedelta(seconds=float(delay))
    multiplier = float(getattr(task, "retry_exponential_backoff", 0) or 1.0)
    cap = getattr(task, "max_retry_delay", None)
    if cap is not None and not isinstance(cap, dt.timedelta):
        cap = dt.timedelta(seconds=float(cap))
    total = dt.timedelta(0)
    for n in range(retries):
        wait = delay if multiplier == 1.0 else 2 * delay * multiplier**n
        total += min(wait, cap) if cap is not None else wait
    return total


def dataset_writers(cleanup: Any, resolve: Callable[[str], str]) -> list[Any]:
    """The idempotent writers (``LanceSparkWriteOperator``) in ``cleanup``'s DAG that may write its dataset.

    A writer whose ``uri`` or connection differs counts only when its URI is templated
    (unknown until it runs).
    """
    from airflow_lance.operators.spark_write import LanceSparkWriteOperator

    dag = getattr(cleanup, "dag", None)
    if dag is None:
        return []
    target = resolve(cleanup.uri)
    return [
        task for task in dag.tasks
        if isinstance(task, LanceSparkWriteOperator)
        and ("{{" in str(task.uri) or (task.lance_conn_id == cleanup.lance_conn_id and resolve(task.uri) == target))
    ]


def racing_writers(cleanup: Any, writers: Iterable[Any]) -> list[tuple[str, dt.timedelta]]:
    """``(task_id, retry window)`` of the ``writers`` with retries that can retry while ``cleanup`` runs."""
    dag = getattr(cleanup, "dag", None)
    upstream = set(cleanup.get_flat_relative_ids(upstream=True)) if dag is not None else set()
    one_run = dag is not None and getattr(dag, "max_active_runs", None) == 1
    racing = []
    for writer in writers:
        window = retry_window(writer)
        if window > dt.timedelta(0) and not (one_run and writer.task_id in upstream):
            racing.append((writer.task_id, window))
    return racing


def policy_warning(
    older_than: dt.timedelta | None, retain_versions: int | None, racing: list[tuple[str, dt.timedelta]]
) -> str | None:
    """The warning for a cleanup policy that can remove a version a racing writer's retry still looks for."""
    if not racing:
        return None
    task_id, window = max(racing, key=lambda item: item[1])
    if older_than is None and retain_versions is None:
        return None  # the core's default policy keeps 14 days: longer than any retry window
    if older_than is not None and older_than >= window:
        return None
    policy = (
        f"older_than={older_than} with retain_versions={retain_versions}" if older_than is not None
        else f"retain_versions={retain_versions} without older_than"
    )
    return (
        f"this cleanup ({policy}) can remove a version committed less than {window} ago, the retry window of "
        f"task {task_id!r}, which can retry while this cleanup runs: a retry whose earlier try committed in a "
        "removed version cannot find that commit by its idempotency key and writes its data again. Set "
        f"older_than (cleanup_older_than) to at least {window}, or run the writers upstream of this cleanup "
        "in a DAG with max_active_runs=1."
    )


def cleanup_warning(
    cleanup: Any, older_than: dt.timedelta | None, retain_versions: int | None, resolve: Callable[[str], str]
) -> str | None:
    """The warning (or None) for the cleanup task ``cleanup`` running with this policy."""
    return policy_warning(older_than, retain_versions, racing_writers(cleanup, dataset_writers(cleanup, resolve)))
