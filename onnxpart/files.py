"""File input and output. Every file onnxpart writes goes through here: written to a temporary file in
the destination folder, flushed, then renamed over the target, so a crash or Ctrl-C never leaves a half
file. Input files are read through :func:`read_text` and :func:`read_json`, which turn a missing,
unreadable or malformed file into a one-line :class:`UserError`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from onnxpart import interrupts
from onnxpart.errors import UserError
from onnxpart.output_guard import check_folder


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; the parent folder must exist."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"cannot write {target}: folder {parent} does not exist")
    with staged(parent / target.name) as handle:
        handle.write(data)
    return target


@contextmanager
def staged(target: Path):
    """A binary handle on a temporary file beside ``target``, flushed to disk and renamed over it on success
    only; removed on any error (a full disk is one line)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        fresh_permissions(fd)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.truncate()  # a trailing hole (skipped zeros) still counts towards the size
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        unlink(tmp)
        if exc.errno == errno.ENOSPC:
            raise UserError(f"no space left on the device while writing {target.name}; nothing was kept") from None
        raise
    except BaseException:
        unlink(tmp)
        raise


def unlink(path) -> None:
    """Remove ``path`` if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fresh_permissions(fd: int) -> None:
    """mkstemp makes files 0600; give a new output file the usual permissions (0666 less the umask)."""
    os.fchmod(fd, 0o666 & ~_umask())


def write_json(path: str | os.PathLike, payload: Any) -> Path:
    """Pretty, key-stable JSON (same inputs -> same bytes), written atomically."""
    text = json.dumps(payload, indent=2, sort_keys=False, allow_nan=False, default=_jsonable)
    return atomic_write_bytes(path, (text + "\n").encode())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """The text of an input file; ``what`` names it in the one-line error for a path that does not exist,
    is a folder, cannot be read or is not UTF-8 text."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder, not a file")
    if not path.exists():
        raise UserError(f"{what} {path} does not exist")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text") from None


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Parse a JSON input file (:func:`read_text`, then :func:`onnxpart.validate.parse_json`, which
    refuses a document nested too deep); ``what`` names it in errors (``"costs file"``, ``"graph file"``…)."""
    from onnxpart.validate import parse_json

    return parse_json(read_text(path, what), str(path))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


class OutputDir:
    """An output folder filled atomically: files go to a hidden sibling staging folder, which replaces
    the target only on :meth:`commit`. The target is checked when the object is made
    (:func:`onnxpart.output_guard.check_folder`: never over a file the run ``reads``; an existing non-empty
    folder only with ``force``, and one onnxpart did not write only with ``clean`` too; a parent folder
    that can be written), so a command refuses before it spends minutes solving. The staging folder is
    created on the first :meth:`path`, so an error or Ctrl-C before anything is written leaves no trace.

    Use as a context manager; on error the staging folder is removed and the target is untouched.
    """

    def __init__(self, path: str | os.PathLike, force: bool = False, clean: bool = False,
                 reads: Iterable[Path] = ()):
        self.target = Path(path)
        self.parent = self.target.parent if str(self.target.parent) else Path(".")
        check_folder(self.target, reads, force, clean)
        self.staging: Path | None = None

    def path(self, name: str) -> Path:
        if self.staging is None:
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", dir=self.parent))
            os.chmod(self.staging, 0o777 & ~_umask())  # mkdtemp makes 0700
        return self.staging / name

    def commit(self) -> Path:
        """Move the staged folder into place (replacing the old target), whole: Ctrl-C or SIGTERM during
        the renames waits for them."""
        self.path("")  # an empty result is still a folder
        with interrupts.deferred():
            if self.target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.old.", dir=self.parent))
                os.replace(self.target, old / "dir")
                os.replace(self.staging, self.target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(self.staging, self.target)
            self.staging = None
        return self.target

    def discard(self) -> None:
        """Remove whatever was staged; the target stays as it was."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    def __enter__(self) -> "OutputDir":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
        elif self.staging is not None:
            self.commit()
