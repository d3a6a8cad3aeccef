"""Direct I/O for local data files (``storage.direct``, ``LocalStore``, the ``direct_io`` option).

Covers: :class:`DirectFileWriter` content and ``tell`` across sizes and buffer types;
``write_retained`` (in place only when offset, address and length allow); that
``O_DIRECT`` is really switched on (only) for files longer than one buffer; ``abort``/``close``
semantics; background write errors surfacing and closing the descriptor; ``file_system_type``
and ``use_direct_io``; the ``direct_io`` storage option; ``LocalStore.open_output`` cleanup;
and an end-to-end write checked against pylance and against a buffered write of the same table
(same pages; large page buffers 4 KiB-aligned in the direct file).

All files are real (pytest's ``tmp_path``, ext4 on the reference machine, and ``/dev/shm``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core import InvalidInputError
from airflow_lance.core.file.reader import LanceFileReader
from airflow_lance.core.file.writer import LARGE_BUFFER_BYTES
from airflow_lance.core.storage import direct
from airflow_lance.core.storage import local as local_module
from airflow_lance.core.storage.direct import (
    ALIGNMENT,
    BUFFER_BYTES,
    DIRECT_AFTER_BYTES,
    DIRECT_FILE_SYSTEMS,
    RETAINED_MIN_BYTES,
    DirectFileWriter,
    file_system_type,
    use_direct_io,
)
from airflow_lance.core.storage.factory import open_store
from airflow_lance.core.storage.local import LocalStore
from airflow_lance.core.storage.options import local_direct_io, resolve

SMALL = 4 * ALIGNMENT  # 16 KiB buffers: many buffer switches with little data
O_DIRECT = getattr(os, "O_DIRECT", 0)
HAS_MOUNTINFO = os.path.exists("/proc/self/mountinfo")
SHM = "/dev/shm"

needs_o_direct = pytest.mark.skipif(not O_DIRECT, reason="platform without O_DIRECT")


# ---------------------------------------------------------------------------------------- helpers


def _payload(size: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random bytes."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def _direct_flag(fd: int) -> bool:
    """Whether ``O_DIRECT`` is set on ``fd``."""
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & O_DIRECT)


def _is_closed(fd: int) -> bool:
    """Whether ``fd`` is no longer an open descriptor."""
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


def _open_new(path: pathlib.Path) -> int:
    """A new file opened write-only, as ``LocalStore`` opens its temp files."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)


def _chunks(data: bytes, sizes: tuple[int, ...]) -> Iterator[bytes]:
    """``data`` cut into pieces whose lengths cycle through ``sizes``."""
    offset, index = 0, 0
    while offset < len(data):
        step = sizes[index % len(sizes)]
        yield data[offset: offset + step]
        offset += step
        index += 1


def _mount_type(path: str) -> str:
    """File system type by ``findmnt`` (an oracle independent of the code under test)."""
    if shutil.which("findmnt") is None:
        pytest.skip("findmnt not available")
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", path], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]  # stacked mounts: findmnt lists the visible (last) one last


class _RecordingWriter(DirectFileWriter):
    """A DirectFileWriter that records, per background write, whether O_DIRECT was on and
    whether it read the caller's memory in place (no copy into the writer's buffer)."""

    switches: ClassVar[list[bool]] = []
    in_place: ClassVar[list[int]] = []

    def _start_background(self, pieces: list[memoryview], size: int) -> None:
        last = pieces[-1].obj
        if all(last is not buffer for buffer in self._maps):  # private attribute: the writer's buffers
            type(self).in_place.append(len(pieces[-1]))
        super()._start_background(pieces, size)
        # private attribute: the descriptor the writer owns
        type(self).switches.append(_direct_flag(self._fd))


def _aligned(data: bytes, shift: int = 0) -> np.ndarray:
    """``data`` copied into a uint8 array whose first byte lies ``shift`` bytes past a 4 KiB boundary."""
    raw = np.empty(len(data) + 2 * ALIGNMENT, dtype=np.uint8)
    start = -int(raw.ctypes.data) % ALIGNMENT + shift
    out = raw[start: start + len(data)]
    out[:] = np.frombuffer(data, dtype=np.uint8)
    return out


@pytest.fixture
def direct_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    """``tmp_path``, skipping unless it is on a file system where ``auto`` means direct I/O."""
    if not O_DIRECT or not HAS_MOUNTINFO:
        pytest.skip("no O_DIRECT or no /proc/self/mountinfo")
    if file_system_type(str(tmp_path)) not in DIRECT_FILE_SYSTEMS:
        pytest.skip(f"tmp_path is on {file_system_type(str(tmp_path))}, not a direct-I/O file system")
    return tmp_path


# ------------------------------------------------------------------------------ 1. content, tell


@pytest.mark.parametrize("direct_on", [True, False], ids=["direct", "buffered"])
@pytest.mark.parametrize(
    "size",
    [0, 1, ALIGNMENT - 1, SMALL - 1, SMALL, SMALL + 1, 2 * SMALL, 5 * SMALL + 4097],
)
def test_content_and_tell_across_sizes(tmp_path: pathlib.Path, size: int, direct_on: bool) -> None:
    """The file holds exactly the bytes written, whatever the write sizes; tell() counts them."""
    data = _payload(size, seed=size)
    path = tmp_path / "f.bin"
    writer = DirectFileWriter(_open_new(path), buffer_bytes=SMALL, direct=direct_on)
    accepted = 0
    for piece in _chunks(data, (1, 7, ALIGNMENT, SMALL - 3, 3 * SMALL + 5)):
        assert writer.write(piece) == len(piece)
        accepted += len(piece)
        assert writer.tell() == accepted
    assert writer.write(b"") == 0 and writer.tell() == size
    writer.close()
    assert writer.closed
    assert path.stat().st_size == size
    assert path.read_bytes() == data


def test_one_write_spanning_many_buffers(tmp_path: pathlib.Path) -> None:
    """A single write longer than both buffers together is split correctly."""
    data = _payload(7 * SMALL + 123, seed=7)
    path = tmp_path / "f.bin"
    with DirectFileWriter(_open_new(path), buffer_bytes=SMALL) as writer:
        assert writer.write(data) == len(data)
        assert writer.tell() == len(data)
    assert path.read_bytes() == data


def test_mixed_buffer_types(tmp_path: pathlib.Path) -> None:
    """bytes, bytearray, memoryview, numpy (any dtype, C-contiguous or 1-D uint8 strided), pyarrow Buffer."""
    rng = np.random.default_rng(1)
    floats = rng.random(10_000, dtype=np.float32)  # 40 000 bytes: crosses two buffer switches
    grid = np.arange(12, dtype=np.int16).reshape(3, 4)  # 2-D, C-contiguous, not bytes
    strided = np.arange(40, dtype=np.uint8)[::3]  # 1-D uint8, non-contiguous: copied element-wise
    arrow = pa.py_buffer(_payload(5000, seed=2))  # memoryview format "b"
    pieces: list[tuple[Any, bytes]] = [
        (b"head", b"head"),
        (bytearray(b"\x00\x01\x02"), b"\x00\x01\x02"),
        (memoryview(_payload(SMALL - 1, seed=3)), _payload(SMALL - 1, seed=3)),
        (np.frombuffer(_payload(777, seed=4), dtype=np.uint8), _payload(777, seed=4)),
        (floats, floats.tobytes()),
        (grid, grid.tobytes()),
        (strided, strided.tobytes()),
        (arrow, arrow.to_pybytes()),
        (np.float64(2.5), np.float64(2.5).tobytes()),
        (memoryview(floats)[10:20], floats[10:20].tobytes()),
        (np.zeros(0, dtype=np.float32), b""),
        (b"tail", b"tail"),
    ]
    path = tmp_path / "f.bin"
    expected = b""
    with DirectFileWriter(_open_new(path), buffer_bytes=SMALL) as writer:
        for obj, raw in pieces:
            assert writer.write(obj) == len(raw), type(obj)
            expected += raw
            assert writer.tell() == len(expected)
    assert path.read_bytes() == expected


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(np.arange(100, dtype=np.float32)[::2], id="strided-float32"),
        pytest.param(np.arange(64, dtype=np.uint8).reshape(8, 8)[:, :3], id="2d-uint8-slice"),
        pytest.param(np.asfortranarray(np.arange(64, dtype=np.uint8).reshape(8, 8)), id="fortran-order"),
    ],
)
def test_non_contiguous_buffers_are_refused_cleanly(tmp_path: pathlib.Path, bad: np.ndarray) -> None:
    """Non-contiguous multi-byte or multi-dimensional views raise TypeError and change nothing."""
    path = tmp_path / "f.bin"
    with DirectFileWriter(_open_new(path), buffer_bytes=SMALL) as writer:
        writer.write(b"abc")
        with pytest.raises(TypeError, match="C-contiguous"):
            writer.write(bad)
        with pytest.raises(TypeError):
            writer.write("text is not bytes")
        assert writer.tell() == 3
        writer.write(np.ascontiguousarray(bad))
    assert path.read_bytes() == b"abc" + np.ascontiguousarray(bad).tobytes()


@pytest.mark.parametrize("buffer_bytes", [0, -ALIGNMENT, 1000, ALIGNMENT + 512])
def test_buffer_size_must_be_a_multiple_of_the_alignment(buffer_bytes: int) -> None:
    """Buffer sizes that cannot be written with O_DIRECT are refused before the fd is used."""
    with pytest.raises(ValueError, match="multiple of 4096"):
        DirectFileWriter(-1, buffer_bytes=buffer_bytes)


def test_file_protocol_basics(tmp_path: pathlib.Path) -> None:
    """writable(), flush() and the defaults (buffer of BUFFER_BYTES)."""
    assert BUFFER_BYTES == 8 * 1024 * 1024 and BUFFER_BYTES % ALIGNMENT == 0
    path = tmp_path / "f.bin"
    writer = DirectFileWriter(_open_new(path))
    assert writer.writable() and not writer.closed
    writer.write(b"x" * 10)
    writer.flush()  # no-op: nothing reaches the file before a buffer fills
    assert path.stat().st_size == 0
    writer.close()
    assert path.read_bytes() == b"x" * 10


# ------------------------------------------------------------------------------ 2. O_DIRECT really used


def test_o_direct_switched_on_after_the_first_full_buffer(direct_dir: pathlib.Path) -> None:
    """On ext4/xfs/btrfs the fd gets O_DIRECT when the first buffer is full, and keeps it."""
    path = direct_dir / "f.bin"
    fd = _open_new(path)
    data = _payload(3 * SMALL + 100, seed=5)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(data[: SMALL - 1])
    assert not _direct_flag(fd)
    writer.write(data[SMALL - 1: SMALL])  # the first buffer is now full
    assert _direct_flag(fd)
    writer.write(data[SMALL:])
    assert _direct_flag(fd)
    writer.close()
    assert _is_closed(fd)
    # the tail (100 bytes) was written padded to 4096 and truncated back
    assert path.stat().st_size == len(data) and path.read_bytes() == data


@needs_o_direct
def test_o_direct_waits_for_direct_after_bytes(direct_dir: pathlib.Path) -> None:
    """With direct_after, the first bytes go through the page cache, the rest with O_DIRECT."""
    path = direct_dir / "after.bin"
    data = _payload(5 * SMALL + 99, seed=21)
    fd = _open_new(path)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL, direct_after=2 * SMALL)
    flags = []
    for start in range(0, len(data), SMALL):
        writer.write(data[start: start + SMALL])
        flags.append(_direct_flag(fd))
    writer.close()
    assert flags == [False, False, True, True, True, True]  # switched at the third full buffer
    assert path.read_bytes() == data
    with pytest.raises(ValueError, match="direct_after"):
        DirectFileWriter(-1, direct_after=-1)


def test_short_file_never_uses_o_direct(direct_dir: pathlib.Path) -> None:
    """A file shorter than one buffer is written without O_DIRECT."""
    path = direct_dir / "f.bin"
    fd = _open_new(path)
    data = _payload(SMALL - 1, seed=6)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    for piece in _chunks(data, (1000,)):
        writer.write(piece)
        assert not _direct_flag(fd)
    writer.close()
    assert path.read_bytes() == data


def test_direct_false_never_sets_o_direct(direct_dir: pathlib.Path) -> None:
    """With direct=False the fd never gets O_DIRECT, however long the file."""
    path = direct_dir / "f.bin"
    fd = _open_new(path)
    data = _payload(6 * SMALL + 9, seed=8)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL, direct=False)
    for piece in _chunks(data, (SMALL // 2 + 1,)):
        writer.write(piece)
        assert not _direct_flag(fd)
    writer.close()
    assert path.read_bytes() == data


@pytest.mark.parametrize("mode, expect_direct", [("true", True), ("auto", True), ("false", False)])
def test_local_store_picks_the_writer(direct_dir: pathlib.Path, mode: str, expect_direct: bool) -> None:
    """LocalStore.open_output hands out a DirectFileWriter exactly when direct I/O applies; a data
    file goes direct from its first byte once it fills a buffer (DIRECT_AFTER_BYTES is 0)."""
    assert DIRECT_AFTER_BYTES == 0
    store = LocalStore(str(direct_dir), str(direct_dir), direct_io=mode)
    data = _payload(BUFFER_BYTES + 4097, seed=9)
    with store.open_output("data/x.lance") as handle:
        assert isinstance(handle, DirectFileWriter) is expect_direct
        handle.write(data[:BUFFER_BYTES - 1])
        if expect_direct:
            # private attribute: the descriptor the writer owns (buffered until a buffer is full)
            assert not _direct_flag(handle._fd)
            assert os.path.getsize(handle_path := _temp_file(direct_dir)) == 0  # nothing written yet
        handle.write(data[BUFFER_BYTES - 1:])
        if expect_direct:
            assert _direct_flag(handle._fd)  # the first full buffer went with O_DIRECT
            handle._wait()  # private: the background write of that buffer
            assert os.path.getsize(handle_path) == BUFFER_BYTES
    assert (direct_dir / "data" / "x.lance").read_bytes() == data
    assert os.listdir(direct_dir / "data") == ["x.lance"]


@pytest.mark.skipif(not os.path.isdir(SHM) or not HAS_MOUNTINFO, reason="no /dev/shm or mountinfo")
def test_local_store_auto_is_buffered_on_tmpfs() -> None:
    """direct_io=auto on tmpfs writes through a plain file."""
    root = pathlib.Path(SHM) / f"airflow-lance-direct-{os.getpid()}"
    try:
        store = LocalStore(str(root), str(root))
        with store.open_output("a.bin") as handle:
            assert not isinstance(handle, DirectFileWriter)
            handle.write(b"hello")
        assert (root / "a.bin").read_bytes() == b"hello"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm")
def test_direct_writer_on_tmpfs_is_correct_either_way() -> None:
    """On tmpfs O_DIRECT is accepted (kernel >= 6.6) or refused (buffered fallback): the content is right."""
    path = pathlib.Path(SHM) / f"airflow-lance-direct-{os.getpid()}.bin"
    data = _payload(3 * SMALL + 77, seed=13)
    try:
        with DirectFileWriter(_open_new(path), buffer_bytes=SMALL) as writer:
            writer.write(data)
        assert path.stat().st_size == len(data) and path.read_bytes() == data
    finally:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------ 2b. writes from the caller's memory


@pytest.mark.parametrize("direct_on", [True, False], ids=["direct", "buffered"])
@pytest.mark.parametrize("head", [0, 100, ALIGNMENT, SMALL + ALIGNMENT], ids=lambda n: f"head{n}")
@pytest.mark.parametrize("shift", [0, 64], ids=["aligned-memory", "unaligned-memory"])
@pytest.mark.parametrize("size", [RETAINED_MIN_BYTES - ALIGNMENT, RETAINED_MIN_BYTES, RETAINED_MIN_BYTES + 4097,
                                  3 * RETAINED_MIN_BYTES + 17], ids=lambda n: f"size{n}")
def test_write_retained_content(tmp_path: pathlib.Path, direct_on: bool, head: int, shift: int, size: int) -> None:
    """write_retained stores exactly its bytes, in order with write(), whatever the file offset,
    the memory alignment and the length (in place or copied)."""
    parts = [_payload(head, seed=1), _payload(size, seed=2), _payload(SMALL + 5, seed=3), b"short"]
    path = tmp_path / "f.bin"
    with DirectFileWriter(_open_new(path), buffer_bytes=SMALL, direct=direct_on) as writer:
        assert writer.alignment == (ALIGNMENT if direct_on and O_DIRECT else 1)
        writer.write(parts[0])
        assert writer.write_retained(_aligned(parts[1], shift)) == size
        assert writer.tell() == head + size
        writer.write(parts[2])
        assert writer.write_retained(parts[3]) == 5
        assert writer.tell() == sum(map(len, parts))
    assert path.read_bytes() == b"".join(parts)


def test_write_retained_writes_aligned_runs_in_place(direct_dir: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run at an aligned offset and address goes to the kernel from the caller's memory with
    O_DIRECT (only its unaligned tail is copied); misaligned or short runs are copied."""
    monkeypatch.setattr(_RecordingWriter, "switches", [])
    monkeypatch.setattr(_RecordingWriter, "in_place", [])
    path = direct_dir / "f.bin"
    fd = _open_new(path)
    parts = [_payload(ALIGNMENT, seed=1), _payload(RETAINED_MIN_BYTES + 10, seed=2),
             _payload(ALIGNMENT - 10, seed=3), _payload(RETAINED_MIN_BYTES, seed=4),
             _payload(RETAINED_MIN_BYTES - ALIGNMENT, seed=5), _payload(2 * RETAINED_MIN_BYTES, seed=6)]
    with _RecordingWriter(fd, buffer_bytes=SMALL) as writer:
        writer.write(parts[0])  # buffered: the file offset stays aligned
        writer.write_retained(_aligned(parts[1]))
        assert _RecordingWriter.in_place == [RETAINED_MIN_BYTES] and _direct_flag(fd)
        assert writer._fill == 10  # private attribute: only the tail was copied into the buffer
        writer.write(parts[2])  # back to an aligned offset
        writer.write_retained(_aligned(parts[3], shift=64))  # misaligned memory: copied
        writer.write_retained(_aligned(parts[4]))  # too short: copied
        assert _RecordingWriter.in_place == [RETAINED_MIN_BYTES]
        writer.write_retained(_aligned(parts[5]))
        assert _RecordingWriter.in_place == [RETAINED_MIN_BYTES, 2 * RETAINED_MIN_BYTES]
    assert all(_RecordingWriter.switches)
    assert path.read_bytes() == b"".join(parts)


def test_write_retained_error_surfaces_at_close(direct_dir: pathlib.Path) -> None:
    """A failed in-place background write is raised by close, which still closes the descriptor."""
    fd = _open_new(direct_dir / "f.bin")
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(bytes(SMALL))  # a full buffer: O_DIRECT is on
    writer._wait()  # private: that buffer is written before the descriptor goes bad
    read_only = os.open(os.devnull, os.O_RDONLY)
    os.dup2(read_only, fd)  # writes to fd now fail with EBADF
    os.close(read_only)
    writer.write_retained(_aligned(_payload(RETAINED_MIN_BYTES, seed=1)))
    with pytest.raises(OSError) as caught:
        writer.close()
    assert caught.value.errno == errno.EBADF
    assert _is_closed(fd)
    with pytest.raises(ValueError, match="closed file"):
        writer.write_retained(b"more")


# ------------------------------------------------------------------------------ 3. abort / close


def test_abort_drops_the_buffered_tail(tmp_path: pathlib.Path) -> None:
    """abort() closes the fd; submitted buffers are on disk, the buffered tail is not."""
    path = tmp_path / "f.bin"
    fd = _open_new(path)
    data = _payload(2 * SMALL + 100, seed=10)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(data)
    writer.abort()
    assert writer.closed and _is_closed(fd)
    assert path.read_bytes() == data[: 2 * SMALL]


def test_abort_of_a_short_file_writes_nothing(tmp_path: pathlib.Path) -> None:
    """Nothing of a file shorter than one buffer reaches the disk on abort."""
    path = tmp_path / "f.bin"
    fd = _open_new(path)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(b"z" * (SMALL - 1))
    writer.abort()
    assert _is_closed(fd) and path.stat().st_size == 0


def test_context_manager_aborts_on_exception(tmp_path: pathlib.Path) -> None:
    """Leaving the with block by an exception aborts and re-raises it."""
    path = tmp_path / "f.bin"
    fd = _open_new(path)
    with pytest.raises(KeyError, match="boom"), DirectFileWriter(fd, buffer_bytes=SMALL) as writer:
        writer.write(_payload(SMALL + 50, seed=11))
        raise KeyError("boom")
    assert writer.closed and _is_closed(fd)
    assert path.stat().st_size == SMALL


def test_close_twice_and_write_after_close(tmp_path: pathlib.Path) -> None:
    """close() and abort() are idempotent; writing to a closed writer raises ValueError."""
    path = tmp_path / "f.bin"
    fd = _open_new(path)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(b"abc")
    writer.close()
    writer.close()
    writer.abort()
    assert _is_closed(fd)
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"more")
    assert writer.tell() == 3 and path.read_bytes() == b"abc"

    aborted = DirectFileWriter(_open_new(tmp_path / "g.bin"), buffer_bytes=SMALL)
    aborted.abort()
    aborted.close()
    with pytest.raises(ValueError, match="closed"):
        aborted.write(b"x")


# ------------------------------------------------------------------------------ 4. background errors


@pytest.mark.parametrize("direct_on", [True, False], ids=["direct", "buffered"])
def test_background_error_surfaces_at_the_next_buffer_switch(tmp_path: pathlib.Path, direct_on: bool) -> None:
    """A failed background write (EBADF on a read-only fd) is raised by the next write once it has failed,
    at the latest by the write that fills the next buffer."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL, direct=direct_on)
    assert writer.write(b"a" * SMALL) == SMALL  # submitted; fails in the background
    with pytest.raises(OSError) as caught:
        writer.write(b"b" * 10)  # raises if the background write has failed by now
        writer.write(b"c" * SMALL)  # waits for it: raises at the latest here
    assert caught.value.errno == errno.EBADF
    writer.abort()
    assert _is_closed(fd) and path.stat().st_size == 0


@pytest.mark.parametrize("direct_on", [True, False], ids=["direct", "buffered"])
def test_background_error_surfaces_at_close(tmp_path: pathlib.Path, direct_on: bool) -> None:
    """A failed background write with nothing left to write is raised by close(), which still closes the fd."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL, direct=direct_on)
    writer.write(b"a" * SMALL)
    with pytest.raises(OSError) as caught:
        writer.close()
    assert caught.value.errno == errno.EBADF
    assert writer.closed and _is_closed(fd)


@pytest.mark.parametrize("size", [10, SMALL + 10], ids=["short-buffered-tail", "long-direct-tail"])
def test_tail_write_error_surfaces_at_close(tmp_path: pathlib.Path, size: int) -> None:
    """An error writing the buffered tail in close() is raised as such (EBADF), and the fd is closed."""
    path = tmp_path / "f.bin"
    fd = _open_new(path)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(b"a" * size)
    writer._wait()  # private: let the background write of a full first buffer finish (it succeeds)
    read_only = os.open(os.devnull, os.O_RDONLY)
    os.dup2(read_only, fd)  # from now on, writes to fd fail with EBADF
    os.close(read_only)
    try:
        with pytest.raises(OSError) as caught:
            writer.close()
        assert caught.value.errno == errno.EBADF
    finally:
        assert writer.closed and _is_closed(fd)


def test_lost_buffer_is_not_forgotten(tmp_path: pathlib.Path) -> None:
    """Once a buffer failed to reach the file, close() must not report success (transient EAGAIN on a pipe)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    os.set_blocking(read_end, False)
    writer = DirectFileWriter(write_end, buffer_bytes=SMALL, direct=False)  # O_DIRECT on a pipe is packet mode
    try:
        with pytest.raises(BlockingIOError):
            for index in range(64):  # the pipe (64 KiB by default) fills up: a background write gets EAGAIN
                writer.write(bytes([index]) * SMALL)
        with contextlib.suppress(BlockingIOError):
            while os.read(read_end, 1 << 20):  # drain: later writes succeed again
                pass
        with pytest.raises(BlockingIOError):  # the failed write is raised again, not forgotten
            writer.write(b"Z" * 10)
        with pytest.raises(BlockingIOError):
            writer.close()
    finally:
        writer.abort()
        os.close(read_end)


def test_abort_ignores_the_background_error(tmp_path: pathlib.Path) -> None:
    """abort() (the error path of callers) does not raise a pending background error and closes the fd."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    writer = DirectFileWriter(fd, buffer_bytes=SMALL)
    writer.write(b"a" * SMALL)
    writer.abort()
    assert _is_closed(fd)


# ------------------------------------------------------------------------------ 5. file system type


@pytest.mark.skipif(not HAS_MOUNTINFO, reason="no /proc/self/mountinfo")
def test_file_system_type_of_known_mounts(tmp_path: pathlib.Path) -> None:
    """tmp_path, /dev/shm and /proc resolve to their mounts' types; paths below a mount too."""
    expected = _mount_type(str(tmp_path))
    assert file_system_type(str(tmp_path)) == expected
    assert file_system_type(str(tmp_path / "not" / "yet" / "there")) == expected
    assert file_system_type("/proc") == "proc"
    assert file_system_type("/proc/self/status") == "proc"
    if os.path.isdir(SHM):
        assert file_system_type(SHM) == "tmpfs" == _mount_type(SHM)
        assert file_system_type(SHM + "/a/b") == "tmpfs"
        link = tmp_path / "to-shm"
        link.symlink_to(SHM)
        assert file_system_type(str(link / "x")) == "tmpfs"  # symlinks are resolved


@pytest.mark.skipif(not HAS_MOUNTINFO, reason="no /proc/self/mountinfo")
def test_file_system_type_on_the_reference_machine(tmp_path: pathlib.Path) -> None:
    """The brief's machine has /tmp on ext4 (skipped elsewhere)."""
    if _mount_type(str(tmp_path)) != "ext4":
        pytest.skip("tmp_path is not on ext4 here")
    assert file_system_type(str(tmp_path)) == "ext4"
    assert use_direct_io("auto", str(tmp_path)) is bool(O_DIRECT)


@pytest.mark.skipif(not HAS_MOUNTINFO or not os.path.isdir(SHM), reason="no mountinfo or /dev/shm")
def test_use_direct_io_modes(tmp_path: pathlib.Path) -> None:
    """auto follows the file system; true and false ignore it."""
    on_direct_fs = file_system_type(str(tmp_path)) in DIRECT_FILE_SYSTEMS
    assert use_direct_io("auto", str(tmp_path)) is (on_direct_fs and bool(O_DIRECT))
    assert use_direct_io("auto", SHM) is False
    assert use_direct_io("auto", "/proc") is False
    for path in (str(tmp_path), SHM):
        assert use_direct_io("false", path) is False
        assert use_direct_io("true", path) is bool(O_DIRECT)


def test_direct_file_systems_constant() -> None:
    """auto is limited to local block-device file systems."""
    assert DIRECT_FILE_SYSTEMS == {"ext4", "xfs", "btrfs"}
    assert direct.MODES == ("auto", "true", "false")


# ------------------------------------------------------------------------------ 6. the storage option


@pytest.mark.parametrize(
    "value, expected",
    [
        ("auto", "auto"), (" AUTO ", "auto"), ("Auto", "auto"),
        ("true", "true"), ("TRUE", "true"), (" yes ", "true"), ("Yes", "true"), ("1", "true"), ("on", "true"),
        ("false", "false"), ("False", "false"), ("NO", "false"), (" 0 ", "false"), ("off", "false"),
        (True, "true"), (False, "false"), (1, "true"), (0, "false"),
    ],
)
def test_local_direct_io_spellings(value: object, expected: str) -> None:
    """auto/true/false and the usual boolean spellings, any case, surrounding spaces."""
    assert local_direct_io({"direct_io": value}) == expected
    assert local_direct_io({"DIRECT_IO": value, "aws_region": "x"}) == expected


def test_local_direct_io_default_and_rejection() -> None:
    """Absent means auto; anything else is an InvalidInputError naming the option."""
    assert local_direct_io(None) == "auto"
    assert local_direct_io({}) == "auto"
    assert local_direct_io({"allow_http": "true"}) == "auto"
    for bad in ("sometimes", "", "2", "truee"):
        with pytest.raises(InvalidInputError, match="direct_io"):
            local_direct_io({"direct_io": bad})


def test_open_store_passes_direct_io(tmp_path: pathlib.Path) -> None:
    """open_store hands the normalised option to LocalStore (paths and file:// URIs)."""
    assert open_store(str(tmp_path / "ds"), {"direct_io": "false"}).direct_io == "false"
    assert open_store(str(tmp_path / "ds"), {"direct_io": " Yes "}).direct_io == "true"
    assert open_store(str(tmp_path / "ds")).direct_io == "auto"
    assert open_store(f"file://{tmp_path}/ds", {"direct_io": "0"}).direct_io == "false"
    with pytest.raises(InvalidInputError, match="direct_io"):
        open_store(str(tmp_path / "ds"), {"direct_io": "sometimes"})
    with pytest.raises(InvalidInputError, match="direct_io"):
        LocalStore(str(tmp_path), str(tmp_path), direct_io="yes")  # the constructor takes canonical modes only


def test_write_dataset_rejects_a_bad_direct_io(uri: str) -> None:
    """A bad option fails before anything is written."""
    with pytest.raises(InvalidInputError, match="direct_io"):
        lance.write_dataset(pa.table({"a": [1]}), uri, storage_options={"direct_io": "sometimes"})
    assert not os.path.exists(uri)


@pytest.mark.parametrize("backend", ["s3", "azure", "gcs", "other"])
def test_remote_option_validation_accepts_direct_io(backend: str) -> None:
    """direct_io is a known option everywhere (one dict can serve local and remote datasets)."""
    resolved = resolve(backend, {"direct_io": "true", "aws_region": "us-east-1"})
    assert resolved.get("direct_io") == "true"
    with pytest.raises(InvalidInputError, match="unknown storage option"):
        resolve(backend, {"direct_iox": "true"})


# ------------------------------------------------------------------------------ 7. end to end


def _big_table(rows: int) -> pa.Table:
    """~27 MB: id, a 32-float vector and a string column, built without Python loops."""
    rng = np.random.default_rng(42)
    ids = pa.array(np.arange(rows, dtype=np.int64))
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 32, dtype=np.float32)), 32)
    names = pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), "")
    return pa.table({"id": ids, "vector": vectors, "name": names})


@pytest.fixture(scope="module")
def big_table() -> pa.Table:
    return _big_table(200_000)


def _temp_file(directory: pathlib.Path) -> pathlib.Path:
    """The one temporary file LocalStore.open_output is writing under ``directory/data``."""
    [temp] = [p for p in (directory / "data").iterdir() if p.name.startswith(".tmp-")]
    return temp


def _data_file(uri: str) -> pathlib.Path:
    """The single .lance data file of a dataset."""
    files = sorted(pathlib.Path(uri, "data").iterdir())
    assert [f.suffix for f in files] == [".lance"], files
    return files[0]


@pytest.mark.interop
@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_end_to_end_direct_write_matches_pylance_and_buffered_bytes(
    direct_dir: pathlib.Path, big_table: pa.Table, version: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A > 8 MiB data file written with direct I/O reads back in pylance and equals a buffered write."""
    pylance = pytest.importorskip("lance")
    monkeypatch.setattr(_RecordingWriter, "switches", [])
    monkeypatch.setattr(_RecordingWriter, "in_place", [])
    monkeypatch.setattr(local_module, "DirectFileWriter", _RecordingWriter)
    direct_uri, plain_uri = str(direct_dir / "direct.lance"), str(direct_dir / "plain.lance")

    ds = lance.write_dataset(big_table, direct_uri, storage_options={"direct_io": "true"},
                             data_storage_version=version)
    assert _RecordingWriter.switches and all(_RecordingWriter.switches)  # O_DIRECT really used
    switches = len(_RecordingWriter.switches)
    lance.write_dataset(big_table, plain_uri, storage_options={"direct_io": "false"}, data_storage_version=version)
    assert len(_RecordingWriter.switches) == switches  # the buffered write never used the direct writer

    direct_file, plain_file = _data_file(direct_uri), _data_file(plain_uri)
    size = direct_file.stat().st_size
    assert size > BUFFER_BYTES and size % ALIGNMENT  # a padded, truncated tail was involved
    in_place = sum(_RecordingWriter.in_place)
    if version == "2.2":  # mini-block pages are gathered into page-aligned memory: written in place
        assert in_place > BUFFER_BYTES
    assert switches >= (size - in_place) // BUFFER_BYTES
    [fragment] = lance.dataset(direct_uri).get_fragments()
    [data_file] = fragment.metadata.files
    assert data_file.file_size_bytes == size
    assert ds.data_storage_version == version
    assert not [n for n in os.listdir(direct_file.parent) if n.startswith(".tmp-")]

    oracle = pylance.dataset(direct_uri)
    assert oracle.data_storage_version == version
    assert oracle.to_table().equals(big_table)
    assert pylance.dataset(plain_uri).to_table().equals(big_table)
    # the same pages; large page buffers start at 4 KiB in the direct file, at 64 bytes in the other
    direct_pages, plain_pages = _page_buffers(direct_file), _page_buffers(plain_file)
    assert [sizes for _, sizes in direct_pages] == [sizes for _, sizes in plain_pages]
    large = [(offset, size) for offsets, sizes in direct_pages for offset, size in zip(offsets, sizes)
             if size >= LARGE_BUFFER_BYTES]
    assert large and all(offset % ALIGNMENT == 0 for offset, _ in large)
    assert any(offset % ALIGNMENT for offsets, sizes in plain_pages for offset, size in zip(offsets, sizes)
               if size >= LARGE_BUFFER_BYTES)


def _page_buffers(path: pathlib.Path) -> list[tuple[list[int], list[int]]]:
    """(buffer offsets, buffer sizes) of every page of a data file, column by column."""
    with pa.OSFile(str(path)) as source:
        reader = LanceFileReader(source, path=str(path))
        return [(list(page.buffer_offsets), list(page.buffer_sizes))
                for column in range(reader.num_columns) for page in reader.column_metadata(column).pages]


# ------------------------------------------------------------------------------ 8. open_output cleanup


@pytest.mark.parametrize("mode", ["true", "false"])
def test_open_output_error_leaves_no_file(direct_dir: pathlib.Path, mode: str) -> None:
    """An exception inside open_output removes the temp file and creates no final file."""
    store = LocalStore(str(direct_dir), str(direct_dir), direct_io=mode)
    data = _payload(DIRECT_AFTER_BYTES + BUFFER_BYTES + 5000, seed=12)
    with pytest.raises(RuntimeError, match="stop"), store.open_output("data/partial.lance") as handle:
        assert isinstance(handle, DirectFileWriter) is (mode == "true")
        handle.write(data)
        if mode == "true":
            assert _direct_flag(handle._fd)  # private attribute: the writer's descriptor
        raise RuntimeError("stop")
    assert os.listdir(direct_dir / "data") == []
    assert not store.exists("data/partial.lance")
    # the store still works afterwards, with the same decision
    with store.open_output("data/ok.lance") as handle:
        handle.write(data[:100])
    assert os.listdir(direct_dir / "data") == ["ok.lance"]


def test_open_output_error_from_the_writer_leaves_no_file(direct_dir: pathlib.Path) -> None:
    """A background write error raised through open_output propagates and leaves nothing behind."""
    store = LocalStore(str(direct_dir), str(direct_dir), direct_io="true")
    with pytest.raises(OSError) as caught, store.open_output("data/x.lance") as handle:
        # make the writer's descriptor (private attribute) read-only: its writes fail with EBADF
        read_only = os.open(os.devnull, os.O_RDONLY)
        os.dup2(read_only, handle._fd)
        os.close(read_only)
        handle.write(bytes(BUFFER_BYTES))  # submitted, fails in the background
        handle.write(bytes(BUFFER_BYTES))  # the next buffer switch raises
    assert caught.value.errno == errno.EBADF
    assert os.listdir(direct_dir / "data") == []


def test_buffers_are_reused_by_the_next_file(tmp_path: pathlib.Path) -> None:
    """A closed writer's buffers serve the next one (no fresh mapping, no page faults per file)."""
    first = DirectFileWriter(_open_new(tmp_path / "a.bin"), buffer_bytes=SMALL)
    first.write(b"a" * (SMALL + 1))
    maps = {id(buffer) for buffer in first._maps}  # private attribute: the writer's mappings
    first.close()
    second = DirectFileWriter(_open_new(tmp_path / "b.bin"), buffer_bytes=SMALL)
    assert {id(buffer) for buffer in second._maps} == maps
    second.write(b"b" * 10)
    second.close()
    assert (tmp_path / "a.bin").read_bytes() == b"a" * (SMALL + 1) and (tmp_path / "b.bin").read_bytes() == b"b" * 10


def test_without_fcntl_every_file_is_written_buffered(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fcntl does not exist (Windows) the module still imports, and writes without O_DIRECT."""
    import builtins
    import importlib.util

    real_import = builtins.__import__

    def no_fcntl(name: str, *args: object, **kwargs: object) -> object:
        if name == "fcntl":
            raise ImportError("no fcntl here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fcntl)
    spec = importlib.util.find_spec("airflow_lance.core.storage.direct")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)  # a private copy: the imported module is untouched
    spec.loader.exec_module(module)
    monkeypatch.undo()
    assert module.fcntl is None and not module.use_direct_io("true", str(tmp_path))
    path = tmp_path / "plain.bin"
    data = _payload(3 * SMALL + 5, seed=4)
    with module.DirectFileWriter(_open_new(path), buffer_bytes=SMALL) as writer:
        writer.write(data)
    assert path.read_bytes() == data
