"""Fault injection and failure recording shared by the Spark write test DAGs."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

from airflow_lance.operators.spark_write import LanceSparkWriteOperator


class FailOnFirstTry(LanceSparkWriteOperator):
    """Fails its first try just before or just after the commit, or after the commit and a cleanup
    that removed the committed version (fault injection)."""

    def __init__(self, *, fail_at: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_at = fail_at

    def _commit(self, spec, staged, key, context):  # type: ignore[no-untyped-def]
        first_try = context["ti"].try_number == 1
        if first_try and self.fail_at == "before_commit":
            raise RuntimeError("injected failure before the commit")
        summary = super()._commit(spec, staged, key, context)
        if first_try and self.fail_at == "after_commit":
            raise RuntimeError("injected failure after the commit")
        if first_try and self.fail_at == "after_commit_and_cleanup":
            # another writer commits, then a cleanup keeping one version removes this commit's version
            # before the retry looks for it
            latest = self.hook.get_dataset(spec.uri)
            latest.delete("id < 0")  # commits a version that deletes nothing, as pylance does
            latest.cleanup_old_versions(retain_versions=1)
            raise RuntimeError("injected failure after the commit, whose version a cleanup then removed")
        return summary


def failure_recorder(root: str) -> Callable[[Any], None]:
    """An ``on_failure_callback`` keeping the exception of a failed task in ``<root>/failures/<task_id>.json``,
    where the test can read it."""

    def record_failure(context: Any) -> None:
        exc = context.get("exception")
        folder = pathlib.Path(root) / "failures"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{context['ti'].task_id}.json").write_text(json.dumps({
            "type": type(exc).__name__,
            "mro": [cls.__name__ for cls in type(exc).__mro__],
            "cause": type(exc.__cause__).__name__ if exc is not None and exc.__cause__ is not None else None,
            "message": str(exc),
        }))

    return record_failure
