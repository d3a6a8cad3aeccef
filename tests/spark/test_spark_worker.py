"""Worker-process settings for bulk writes: the garbage collector and glibc's malloc."""

from __future__ import annotations

import gc
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from airflow_lance.spark.worker import bulk_write

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Counts the page faults of re-allocating memory just freed: 4 rounds of malloc, fill, free of
# 48 MiB (above glibc's default mmap threshold, so by default every round maps fresh pages).
_PROBE = textwrap.dedent(
    """
    import ctypes, json, resource, sys
    from airflow_lance.spark import worker

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    SIZE = 48 << 20

    def cycle():
        pointer = libc.malloc(SIZE)
        ctypes.memset(pointer, 1, SIZE)
        libc.free(pointer)

    def faults_of_reuse():
        cycle()  # the first allocation may need fresh pages either way
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(4):
            cycle()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    default = faults_of_reuse()
    if sys.argv[1] == "retain":
        applied = worker.retain_freed_memory()
    else:  # a real partition write, which prepares the process
        import pyarrow as pa
        from airflow_lance.spark.writer import write_partition
        batch = pa.RecordBatch.from_pydict({"x": list(range(1000))})
        list(write_partition(iter([batch]), uri=sys.argv[2], mode="create", storage_options={},
                             max_rows_per_file=1000, max_bytes_per_file=1 << 30))
        applied = worker._process_prepared
    print(json.dumps({"default": default, "tuned": faults_of_reuse(), "applied": applied}))
    """
)
_PAGES_PER_ROUND = (48 << 20) // 4096


def _probe(*args: str, env: dict[str, str] | None = None) -> dict:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    environment.update(env or {})
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], env=environment, capture_output=True,
                         text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_collector_is_off_during_a_write_and_the_heap_frozen_once() -> None:
    assert gc.isenabled()
    with bulk_write():
        assert not gc.isenabled()
        frozen = gc.get_freeze_count()
    assert gc.isenabled() and frozen > 0
    survivors = [object() for _ in range(1000)]
    with bulk_write():  # later writes do not freeze again (frozen objects may have died since)
        assert gc.get_freeze_count() <= frozen
    del survivors
    gc.disable()
    try:
        with bulk_write():
            pass
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_freed_memory_is_reused_without_page_faults() -> None:
    result = _probe("retain")
    assert result["applied"] is True
    assert result["default"] > 2 * _PAGES_PER_ROUND  # by default: fresh pages every round
    assert result["tuned"] < _PAGES_PER_ROUND // 10  # retained: the same pages again


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_partition_write_prepares_the_worker_process(tmp_path) -> None:
    result = _probe("write", str(tmp_path / "ds.lance"))
    assert result["applied"] is True
    assert result["tuned"] < _PAGES_PER_ROUND // 10 < result["default"]


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
@pytest.mark.parametrize("env", [{"MALLOC_TRIM_THRESHOLD_": "1048576"}, {"MALLOC_MMAP_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}])
def test_the_environment_chooses_malloc_settings_when_it_sets_them(env: dict[str, str]) -> None:
    """A user's MALLOC_* / GLIBC_TUNABLES settings (e.g. spark.executorEnv) are left alone."""
    result = _probe("retain", env=env)
    assert result["applied"] is False
    assert result["tuned"] > 2 * _PAGES_PER_ROUND
