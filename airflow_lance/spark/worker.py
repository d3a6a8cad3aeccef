"""Settings of a Spark Python worker process for the bulk writes it runs.

A Spark Python worker streams a partition's Arrow batches through an encoder that
allocates many large, short-lived arrays. Two process-wide defaults tuned for small
interactive programs then cost more than the encoding itself:

* **The cyclic garbage collector.** A write creates no reference cycles, but every
  collection walks the worker's whole heap (pyarrow, protobuf and PySpark's modules), and
  PySpark's daemon runs a full collection after every task of a reused worker.
* **glibc's malloc giving memory back to the kernel.** Arrays above glibc's adaptive
  ``mmap`` threshold (128 KiB, rising to at most 32 MiB) get fresh pages from the kernel
  and return them on ``free``; freed memory at the top of the heap is trimmed the same
  way. Each fresh page is a page fault plus zeroing, which on virtual machines that report
  free pages to the host costs several times the copy that fills it: measured in a Spark
  job, about a third of the Python workers' CPU went to page faults for memory the worker
  had just freed.

:func:`bulk_write` handles both. The first bulk write of a worker process collects once and
moves what is alive then (mostly modules) out of the collector's sight with
``gc.freeze()``, and lets glibc keep freed memory for reuse (:func:`retain_freed_memory`).
Each bulk write runs with the collector off; reference counting still frees memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import platform
from collections.abc import Iterator

#: Allocations up to this size come from the heap instead of their own ``mmap``.
MMAP_THRESHOLD_BYTES = 256 << 20
#: The highest ``mmap`` threshold some glibc versions accept on 64-bit systems.
_OLD_GLIBC_MMAP_THRESHOLD_MAX = 32 << 20
#: Free memory at the top of the heap kept by the process instead of returned to the kernel.
TRIM_THRESHOLD_BYTES = 512 << 20

# mallopt(3) parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Environment through which a user picks glibc's malloc settings; set, they win.
_MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_process_prepared = False


def retain_freed_memory() -> bool:
    """Let glibc's malloc keep freed memory in this process for the next allocation.

    Sets ``M_MMAP_THRESHOLD`` to :data:`MMAP_THRESHOLD_BYTES` and ``M_TRIM_THRESHOLD``
    to :data:`TRIM_THRESHOLD_BYTES`: the process then holds on to about its peak heap,
    as a JVM executor holds its heap, instead of faulting the same memory in again for
    every batch. Returns whether both settings took. Nothing changes (and ``False`` is
    returned) where the C library is not glibc, or when the process environment already
    chooses these settings (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or malloc
    ``GLIBC_TUNABLES``, e.g. through ``spark.executorEnv.*``).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in _MALLOC_ENVIRONMENT) or "glibc.malloc." in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; some glibc versions refuse thresholds above 32 MiB.
    applied = (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        or mallopt(_M_MMAP_THRESHOLD, _OLD_GLIBC_MMAP_THRESHOLD_MAX) == 1
    )
    return (mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1) and applied


def _prepare_process() -> None:
    """Once per process: freeze the heap that exists now, keep freed memory for reuse."""
    global _process_prepared
    if _process_prepared:
        return
    _process_prepared = True
    gc.collect()
    gc.freeze()
    retain_freed_memory()


@contextlib.contextmanager
def bulk_write() -> Iterator[None]:
    """Run one bulk write (a partition, a compaction bin) in a Spark Python worker.

    The first call in a process prepares it (see the module docstring); every call keeps
    the cyclic garbage collector off until the write ends, and leaves it as it was.
    """
    _prepare_process()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
