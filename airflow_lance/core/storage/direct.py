"""Large local files written with direct I/O (``O_DIRECT``): no copy through the page cache.

Data files are written once, in one stream, and never read back by the writer. Buffered
writes copy every byte into freshly allocated page-cache pages; on virtual machines whose
free memory is handed back to the host (virtio-balloon free page reporting) that first
touch costs several times the copy itself. :class:`DirectFileWriter` gathers the stream
in a page-aligned buffer and hands each full buffer to the kernel with ``O_DIRECT``, the
device reading straight from it, while the next buffer fills on the calling thread.

A file shorter than one buffer, and the first ``direct_after`` bytes of any file, are
written with plain buffered writes: short files gain nothing from direct I/O. The tail of
a long file is written padded to the alignment and the file is truncated to its true
length. File systems that refuse ``O_DIRECT`` (``EINVAL``) get buffered writes, so callers
never need to know.

A caller that lays its stream out for it (the Lance file writer, for large page buffers)
skips even the copy into the buffer: :meth:`DirectFileWriter.write_retained` hands a long
run that starts at an aligned file offset and an aligned address to the kernel straight
from the caller's memory.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from typing import Any, Self

import numpy as np

#: Alignment of direct transfers (memory, file offset, length): safe for 512 B and 4 KiB sector devices.
ALIGNMENT = 4096
#: Bytes gathered before one direct write (a multiple of :data:`ALIGNMENT`).
BUFFER_BYTES = 8 * 1024 * 1024
#: Shortest run :meth:`DirectFileWriter.write_retained` writes from the caller's memory
#: (shorter ones are copied into the buffer: one more system call would cost more).
RETAINED_MIN_BYTES = 1024 * 1024
#: Bytes a local data file is written buffered before it switches to direct I/O: none. A file
#: that fills a whole buffer is a bulk stream; on a VM whose fresh page-cache pages are
#: expensive, buffering the first 32 MiB of each file doubled the kernel time of a Spark
#: write job's workers (measured). A file shorter than one buffer stays buffered anyway.
DIRECT_AFTER_BYTES = 0

try:
    import fcntl
except ImportError:  # Windows: no O_DIRECT either, every file is written buffered
    fcntl = None  # type: ignore[assignment]
_O_DIRECT = getattr(os, "O_DIRECT", 0) if fcntl is not None else 0
#: File systems on which ``direct_io="auto"`` uses direct I/O (local block devices, well-tested O_DIRECT).
DIRECT_FILE_SYSTEMS = frozenset({"ext4", "xfs", "btrfs"})
MODES = ("auto", "true", "false")


class _BufferPool:
    """Page-aligned buffers kept for the next file: a fresh mapping costs a page fault and a zeroed
    page per 4 KiB (on some virtual machines much more), a reused one nothing."""

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> mmap.mmap:
        """A buffer of ``size`` bytes, the one given back last if there is one."""
        with self._lock:
            for index in range(len(self._free) - 1, -1, -1):
                if len(self._free[index]) == size:
                    return self._free.pop(index)
        return mmap.mmap(-1, size)

    def give(self, buffer: mmap.mmap) -> None:
        """Keep ``buffer`` for the next file (unmapping the oldest kept one beyond ``keep``)."""
        with self._lock:
            self._free.append(buffer)
            evicted = self._free.pop(0) if len(self._free) > self._keep else None
        if evicted is not None:
            evicted.close()


_POOL = _BufferPool()


def file_system_type(path: str) -> str | None:
    """Type of the file system holding ``path`` (from ``/proc/self/mountinfo``), None if unknown."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        mount_point = parts[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, rest.split()[0]
    return best_type


def use_direct_io(mode: str, path: str) -> bool:
    """Whether files under ``path`` get direct I/O: ``mode`` is ``auto`` (on for
    :data:`DIRECT_FILE_SYSTEMS`), ``true`` (wherever the kernel accepts it) or ``false``."""
    if not _O_DIRECT or mode == "false":
        return False
    return mode == "true" or file_system_type(path) in DIRECT_FILE_SYSTEMS


class DirectFileWriter:
    """A write-only binary file over ``fd`` that switches to ``O_DIRECT`` at the first full buffer
    after ``direct_after`` bytes.

    Two page-aligned buffers alternate: while one is being written by a background thread
    (``os.write`` releases the GIL), the caller fills the other. ``close`` writes the rest and
    closes ``fd``. An error of a background write is raised by the next ``write`` that fills a
    buffer, or by ``close``; after a failed write every further ``write`` and ``close`` raises
    it again (part of the stream is missing: discard the file, ``abort`` closes it quietly).
    """

    def __init__(self, fd: int, *, buffer_bytes: int = BUFFER_BYTES, direct: bool = True,
                 direct_after: int = 0) -> None:
        if buffer_bytes <= 0 or buffer_bytes % ALIGNMENT:
            raise ValueError(f"buffer_bytes must be a positive multiple of {ALIGNMENT}")
        if direct_after < 0:
            raise ValueError("direct_after must not be negative")
        self._fd = fd
        self._capacity = buffer_bytes
        self._maps = [_POOL.take(buffer_bytes), _POOL.take(buffer_bytes)]
        self._views = [memoryview(m) for m in self._maps]
        self._current = 0
        self._fill = 0
        self._size = 0
        self._direct = False
        self._want_direct = bool(direct and _O_DIRECT)
        self._direct_after = direct_after
        self._submitted = 0  # bytes handed to the background writer (whole buffers: aligned)
        self._pending: threading.Thread | None = None
        self._error: BaseException | None = None
        self.closed = False

    @property
    def alignment(self) -> int:
        """File offset and memory alignment at which :meth:`write_retained` skips its copy
        (1 for a file that is not going to use direct I/O)."""
        return ALIGNMENT if self._want_direct or self._direct else 1

    # ------------------------------------------------------------------ file protocol

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        """Nothing to do: bytes reach the file when a buffer fills or at ``close``."""

    def write(self, data: Any) -> int:
        """Append ``data`` (bytes-like: a C-contiguous buffer or a 1-D byte view); returns its length in bytes."""
        view = self._byte_view(data)
        total = len(view)
        done = 0
        while done < total:
            take = min(self._capacity - self._fill, total - done)
            self._views[self._current][self._fill: self._fill + take] = view[done: done + take]
            self._fill += take
            done += take
            if self._fill == self._capacity:
                self._submit()
        self._size += total
        return total

    def write_retained(self, data: Any) -> int:
        """Append ``data`` that nobody modifies or frees before this file is closed; returns its length.

        When direct I/O is on (or due), the file is at an :attr:`alignment` offset and ``data``
        starts at an aligned address and is at least :data:`RETAINED_MIN_BYTES` long, what is
        buffered and then the aligned part of ``data`` go to the background writer, which reads
        ``data`` in place (holding a reference until written); only its unaligned tail is copied.
        Otherwise the same as :meth:`write`.
        """
        view = self._byte_view(data)
        run = len(view) - len(view) % ALIGNMENT
        if (run < RETAINED_MIN_BYTES or self._size % ALIGNMENT or not (self._want_direct or self._direct)
                or _address(view) % ALIGNMENT):
            return self.write(view)
        self._wait()
        if not self._go_direct():
            return self.write(view)
        pieces = [self._views[self._current][: self._fill], view[:run]] if self._fill else [view[:run]]
        self._start_background(pieces, self._fill + run)
        self._size += run
        if run < len(view):
            self.write(view[run:])
        return len(view)

    def close(self) -> None:
        """Write what is buffered, wait for the background write and close the descriptor."""
        if self.closed:
            return
        self.closed = True
        try:
            self._wait()
            if self._fill:
                tail = self._views[self._current]
                if self._direct:
                    padded = -(-self._fill // ALIGNMENT) * ALIGNMENT
                    self._write_all(tail[:padded])
                    os.ftruncate(self._fd, self._size)
                else:
                    self._write_all(tail[: self._fill])
        except BaseException as exc:
            self._error = self._error or exc
            raise
        finally:
            os.close(self._fd)
            self._release()

    def abort(self) -> None:
        """Close without writing what is buffered (the caller discards the file)."""
        if self.closed:
            return
        self.closed = True
        try:
            self._wait(raise_error=False)
        finally:
            os.close(self._fd)
            self._release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # ------------------------------------------------------------------ internals

    def _byte_view(self, data: Any) -> memoryview:
        """``data`` as a flat byte view, after checking that this file still takes writes."""
        if self.closed:
            raise ValueError("write to a closed file")
        if self._error is not None:
            raise self._error
        view = memoryview(data)
        return view if view.ndim == 1 and view.format == "B" else view.cast("B")

    def _submit(self) -> None:
        """Hand the full current buffer to the background writer and continue in the other one."""
        self._wait()
        self._go_direct()
        self._start_background([self._views[self._current]], self._capacity)

    def _go_direct(self) -> bool:
        """Switch the descriptor to ``O_DIRECT`` once ``direct_after`` bytes are submitted; whether it is on."""
        if self._want_direct and not self._direct and self._submitted >= self._direct_after:
            self._direct = _set_direct(self._fd, True)
            self._want_direct = self._direct
        return self._direct

    def _start_background(self, pieces: list[memoryview], size: int) -> None:
        """Write ``pieces`` (the current buffer's filled part first, if it is one of them) in the
        background, in order, and continue in the other buffer. The previous write must be done."""
        self._submitted += size
        self._pending = threading.Thread(target=self._background_write, args=(pieces,), daemon=True)
        self._pending.start()
        self._current ^= 1
        self._fill = 0

    def _background_write(self, pieces: list[memoryview]) -> None:
        try:
            for piece in pieces:
                self._write_all(piece)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self._error = exc

    def _wait(self, raise_error: bool = True) -> None:
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._error is not None and raise_error:
            raise self._error

    def _write_all(self, buffer: memoryview) -> None:
        done = 0
        while done < len(buffer):
            try:
                written = os.write(self._fd, buffer[done:])
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self._direct:
                    raise
                # the file system takes the flag but not the transfer: finish buffered
                self._direct = _set_direct(self._fd, False)
                continue
            done += written
            if done < len(buffer) and self._direct and done % ALIGNMENT:
                self._direct = _set_direct(self._fd, False)  # a short write broke the alignment

    def _release(self) -> None:
        """Hand the buffers back to the pool. A traceback may still hold a slice of one (a failed
        write): that mapping is then left for the garbage collector, so the write's error is what
        surfaces."""
        for view, buffer in zip(self._views, self._maps, strict=True):
            try:
                view.release()
            except BufferError:
                continue
            _POOL.give(buffer)


def _address(view: memoryview) -> int:
    """Memory address of a byte view's first byte."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if len(view) else 0


def _set_direct(fd: int, on: bool) -> bool:
    """Switch ``O_DIRECT`` on or off for ``fd``; returns whether it is now on."""
    if not _O_DIRECT:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | _O_DIRECT) if on else (flags & ~_O_DIRECT))
    except OSError:
        return False if on else bool(flags & _O_DIRECT)
    return on
