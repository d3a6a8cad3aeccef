"""Fault injection for the row-changing operators (update, delete, merge insert) and the other operators
that stage a Spark job's result before committing it (compaction, Kartothek import)."""

from __future__ import annotations

from typing import Any


def failing_first_try(operator_class: type, fail_at: str) -> type:
    """A subclass of ``operator_class`` whose first try fails just before the commit (after the
    change was planned and written) or just after it (``fail_at``: ``before_commit`` /
    ``after_commit``)."""

    class FailOnFirstTry(operator_class):  # type: ignore[misc, valid-type]
        def plan(self, ds: Any, key: str, context: Any) -> Any:
            planned = super().plan(ds, key, context)
            if fail_at == "before_commit" and context["ti"].try_number == 1:
                raise RuntimeError("injected failure before the commit")
            return planned

        def _finish(self, context: Any, summary: dict[str, Any]) -> dict[str, Any]:
            if fail_at == "after_commit" and context["ti"].try_number == 1:
                raise RuntimeError("injected failure after the commit")
            return super()._finish(context, summary)

    FailOnFirstTry.__name__ = f"{operator_class.__name__}FailingFirstTry"
    return FailOnFirstTry


def with_concurrent_commit(operator_class: type, change: Any) -> type:
    """A subclass of ``operator_class`` that runs ``change(uri)`` (another writer's commit) after
    its first plan was written and before it commits: the commit meets a concurrent transaction."""

    class WithConcurrentCommit(operator_class):  # type: ignore[misc, valid-type]
        _changed = False

        def plan(self, ds: Any, key: str, context: Any) -> Any:
            planned = super().plan(ds, key, context)
            if not self._changed:
                self._changed = True
                change(ds.uri)
            return planned

    WithConcurrentCommit.__name__ = f"{operator_class.__name__}WithConcurrentCommit"
    return WithConcurrentCommit


def failing_first_try_after(operator_class: type, method: str) -> type:
    """A subclass of ``operator_class`` whose first try fails just after its ``method(..., context)``
    returned: after the Spark job staged its result (``_rewrite_on_spark`` of the compaction,
    ``_write_on_spark`` of the Kartothek import), before the commit."""

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = getattr(super(FailOnFirstTry, self), method)(*args, **kwargs)
        if args[-1]["ti"].try_number == 1:  # the context: the method's last argument
            raise RuntimeError(f"injected failure after {method}, before the commit")
        return result

    class FailOnFirstTry(operator_class):  # type: ignore[misc, valid-type]
        pass

    setattr(FailOnFirstTry, method, failing)
    FailOnFirstTry.__name__ = f"{operator_class.__name__}FailingFirstTry"
    return FailOnFirstTry
