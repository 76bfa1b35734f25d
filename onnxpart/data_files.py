"""External-data bytes from one file to another, as fast as the file system allows and never holding them.

Three ways an emitted model gets the bytes of the input's weights (``--weights``, :mod:`onnxpart.writer`):

* a copy (:func:`copy_range`, :func:`clone_file`): a whole file is first offered to ``FICLONE``, which
  shares its blocks copy-on-write (btrfs, xfs, …: instant and safe); otherwise every *data* extent is
  copied in the kernel by ``copy_file_range`` — what GNU ``cp`` does, at its speed, and itself a reflink on
  file systems that can —, and the holes between extents (``SEEK_DATA``/``SEEK_HOLE``) are skipped, so a
  sparse file stays sparse; ``pread``/``pwrite`` where the kernel refuses;
* a hard link (:func:`hard_link`), only when asked: the same inode, so an in-place edit of the input
  shows through;
* nothing at all (``reference``): the writer keeps the input's references, and names the input's folder in
  the model's metadata (:data:`FOLDER_KEY`), where :func:`data_folder` finds it.

Every copy reports its progress to a :data:`Progress` callback (the CLI draws the bar; the library
prints nothing), and every file is written under a temporary name and renamed (:func:`onnxpart.files.staged`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from onnxpart import onnx_wire
from onnxpart.errors import UserError
from onnxpart.files import staged, unlink

#: ``progress(file name, bytes done, bytes in all)``: called when a file's copy starts, after each step, and
#: once it ends, finished or not, with ``None`` for the bytes done
Progress = Callable[[str, "int | None", int], None]

CHUNK = 1 << 24  # 16 MiB: the most of a tensor held in memory by the pread/pwrite fallback
STEP = 1 << 28  # 256 MiB: one copy_file_range call, between two progress reports
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write (btrfs, xfs, ...)
_ZEROS = memoryview(bytes(CHUNK))  # a view: slicing it for a comparison copies nothing
#: metadata key of a model written with ``--weights reference``: its data folder, relative to its own
FOLDER_KEY = "onnxpart.weights_folder"
_SEEK_DATA, _SEEK_HOLE = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
_KERNEL_COPY = getattr(os, "copy_file_range", None)  # Linux only
_KERNEL_REFUSES = {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM}


class Tally:
    """Bytes done of one file's copy, reported to a :data:`Progress` callback (or nowhere); as a context
    manager, its start and its end (an error's too, so that a progress bar always closes)."""

    def __init__(self, progress: Progress | None, name: str, total: int):
        self.progress, self.name, self.total, self.done = progress, name, total, 0

    def __enter__(self) -> "Tally":
        self.advance(0)
        return self

    def __exit__(self, *_) -> None:
        if self.progress is not None:
            self.progress(self.name, None, self.total)

    def advance(self, count: int) -> None:
        self.done += count
        if self.progress is not None:
            self.progress(self.name, self.done, self.total)


def copy_range(src, dst, offset: int, length: int, tally: Tally | None = None) -> None:
    """Copy ``length`` bytes of the open file ``src`` from ``offset`` to the buffered ``dst`` at its
    position (which ends ``length`` further on). Only data extents are copied, by ``copy_file_range``;
    holes are skipped (the final truncate of :func:`onnxpart.files.staged` gives a trailing hole its size)."""
    fd = src.fileno()
    end = offset + length
    size = os.fstat(fd).st_size
    if end > size:
        raise UserError(f"{getattr(src, 'name', 'external data')} ended {end - max(size, offset)} bytes early")
    tally = tally or Tally(None, "", length)
    dst.flush()
    out, start = dst.fileno(), dst.tell()
    position = offset
    while position < end:
        data = _next(fd, position, end, _SEEK_DATA, position)
        stop = _next(fd, data, end, _SEEK_HOLE, end)
        tally.advance(data - position)  # a hole
        while data < stop:
            copied = _copy_step(fd, out, data, start + data - offset, min(STEP, stop - data), src)
            data += copied
            tally.advance(copied)
        position = stop
    dst.seek(start + length)


def _next(fd: int, position: int, end: int, whence: int | None, unknown: int) -> int:
    """The next data (``SEEK_DATA``) or hole (``SEEK_HOLE``) offset at or after ``position``, at most
    ``end`` (no data left: ``end``); ``unknown`` where the file system cannot say."""
    if position >= end:
        return end
    if whence is None:
        return unknown
    try:
        return min(os.lseek(fd, position, whence), end)
    except OSError as exc:
        return end if exc.errno == errno.ENXIO else unknown


def _copy_step(fd: int, out: int, src_offset: int, dst_offset: int, count: int, src) -> int:
    """Copy up to ``count`` bytes in the kernel (``pread``/``pwrite`` of :data:`CHUNK` where it refuses);
    -> how many were copied (at least one)."""
    try:
        if _KERNEL_COPY is None:
            raise OSError(errno.ENOSYS, "no copy_file_range here")
        copied = _KERNEL_COPY(fd, out, count, src_offset, dst_offset)
    except OSError as exc:
        if exc.errno not in _KERNEL_REFUSES:
            raise
        chunk = os.pread(fd, min(CHUNK, count), src_offset)
        if chunk and chunk != _ZEROS[:len(chunk)]:
            os.pwrite(out, chunk, dst_offset)
        copied = len(chunk)
    if not copied:
        raise UserError(f"{getattr(src, 'name', 'external data')} ended {count} bytes early")
    return copied


def write_sparse(handle, data: bytes | memoryview) -> None:
    """Write ``data`` at ``handle``'s position, its all-zero chunks as holes (seeks)."""
    view = memoryview(data)
    for start in range(0, len(view), CHUNK):
        chunk = view[start:start + CHUNK]
        if chunk == _ZEROS[:len(chunk)]:
            handle.seek(len(chunk), os.SEEK_CUR)  # a hole: the final truncate fixes the size
        else:
            handle.write(chunk)


def clone_file(source: Path, target: Path, progress: Progress | None = None) -> Path:
    """``source`` copied whole to ``target`` (atomically): shared copy-on-write where the file system can
    (``FICLONE``), else :func:`copy_range`'s kernel copy of its data extents."""
    with open(source, "rb") as src, staged(target) as dst, Tally(progress, target.name,
                                                                   os.fstat(src.fileno()).st_size) as tally:
        size = tally.total
        if _reflink(src, dst):
            dst.seek(size)
            tally.advance(size)
        else:
            copy_range(src, dst, 0, size, tally)
    return target


def hard_link(source: Path, target: Path) -> Path:
    """``target`` made a hard link of ``source`` (atomically: linked under a temporary name, renamed). One
    that already is (another emitted model linked it) is kept; any other file there is refused."""
    if target.exists():
        if os.path.samefile(source, target):
            return target
        raise UserError(f"--weights link: {target.name} in the output would replace an emitted file; rename the input's "
                        "data file or use --weights copy")
    tmp = target.parent / f".{target.name}.{os.urandom(6).hex()}.tmp"  # os.link never replaces a file
    try:
        os.link(source, tmp)
        os.replace(tmp, target)
    except OSError as exc:
        unlink(tmp)
        if exc.errno == errno.EXDEV:
            raise UserError(f"--weights link: {source} and the output folder are on different file systems, where "
                            "hard links cannot reach; use --weights copy or reference") from None
        raise
    return target


def same_file_system(a: Path, b: Path) -> bool:
    """Whether a hard link from folder ``a`` into folder ``b`` can be made (same device)."""
    return os.stat(a).st_dev == os.stat(b).st_dev


def data_folder(path: str | os.PathLike) -> Path | None:
    """The folder from which a model written with ``--weights reference`` reads its weights (its
    :data:`FOLDER_KEY` metadata, relative to the file's own folder); None for any other file."""
    path = Path(path)
    try:
        folder = onnx_wire.metadata(path).get(FOLDER_KEY)
    except OSError:
        return None
    return None if folder is None else path.parent / folder


def _reflink(src, dst) -> bool:
    try:
        import fcntl

        fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        return True
    except (OSError, ImportError, AttributeError):
        return False
