"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import gc
import os
import pathlib
import shutil
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


def timed_writes(write: Callable[[str], object], out: str, reps: int) -> tuple[float, float, int]:
    """Best wall seconds of ``reps`` runs of ``write(out)``, the process CPU seconds (all threads) of that
    run, and the bytes under ``out`` after the last. Each run writes into an emptied ``out`` after
    ``os.sync()``, so no writeback of an earlier run's dirty pages lands in it."""
    best = best_cpu = float("inf")
    for _ in range(reps):
        shutil.rmtree(out, ignore_errors=True)
        os.sync()
        start, cpu = time.perf_counter(), time.process_time()
        write(out)
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
        if elapsed < best:
            best, best_cpu = elapsed, used
    size = sum(f.stat().st_size for f in pathlib.Path(out).rglob("*") if f.is_file())
    return best, best_cpu, size
