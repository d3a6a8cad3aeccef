"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], reps: int, setup: Callable[[], None] | None = None) -> float:
    """Median seconds of ``reps`` runs of ``fn``; each result is freed and gc run before the next."""
    times = []
    for _ in range(reps):
        if setup:
            setup()
        gc.collect()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        del result
    return statistics.median(times)
