"""Where a run may write: its output (``-o``) checked, before any solving, against every file the run
reads, against what is already there, and for a folder it can write in.

* :func:`run_reads` — everything a command that writes reads: the model or graph file, the model's
  external-data files, ``--costs``, a ``--device`` spec file, the ``--system`` file and every file it
  names. (``--check-certificate`` reads a folder but writes nothing.)
* :func:`check_folder` (an output folder, :class:`onnxpart.files.OutputDir`) and :func:`check_file`
  (``annotate``'s costs file). Refused, with exit 2 and the file named: an output that is an input, a
  folder above one (symlinks resolved, on both sides), or an existing folder holding a hard link to one
  (same device and inode); an existing output without ``--force``; with ``--force``, one onnxpart did not
  write (a folder without onnxpart's ``certificate.json``, a file that is not an onnxpart costs file)
  unless ``--clean`` too, so a typo in ``-o`` cannot wipe a folder; a parent folder where nothing can be
  created (checked by creating and removing a probe, so a read-only folder fails in a second, not after
  the solve). An existing empty folder is used as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from onnxpart.errors import UserError

CERTIFICATE = "certificate.json"  # every strategy command writes one (onnxpart.certificate, one schema)


def run_reads(model: Path, *models: Any, costs: Path | None = None, device: str | None = None,
              system: Any = None) -> list[Path]:
    """Every path a command reads: ``model`` (an ONNX model, a graph file or a matrix program), the
    external-data files of each loaded model in ``models`` (:class:`onnxpart.onnx_io.LoadedModel` or
    None), ``costs``, ``device`` when it names a file (as :func:`onnxpart.cost_models.load_device` reads
    it) and the ``system``'s files (:attr:`onnxpart.schedule.system.model.System.files`)."""
    reads = [Path(model)]
    for loaded in models:
        if loaded is not None:
            reads += loaded.external_files
    if device is not None and Path(device).is_file():
        reads.append(Path(device))
    if system is not None:
        reads += system.files
    return reads + ([Path(costs)] if costs is not None else [])


def check_folder(target: Path, reads: Iterable[Path], force: bool, clean: bool) -> None:
    """Refuse ``target`` as an output folder (see the module doc) before anything is solved or written."""
    parent = output_parent(target)
    reads = list(reads)
    _refuse_overlap(target, reads)
    if target.exists() or target.is_symlink():
        if not target.is_dir():
            raise UserError(f"output path {target} exists and is not a folder")
        entries = sorted(p.name for p in target.iterdir())
        if entries:
            _refuse_replacing(target, entries, force, clean)
            _refuse_hard_links(target, reads)
    _probe(parent, target)


def check_file(target: Path, reads: Iterable[Path], force: bool, clean: bool, schema: str) -> None:
    """Refuse ``target`` as an output file: like :func:`check_folder`, an existing file being replaced
    with ``--force`` only when it is JSON carrying ``schema`` (onnxpart wrote it), else ``--force --clean``."""
    parent = output_parent(target)
    reads = list(reads)
    _refuse_overlap(target, reads)
    if target.is_dir():
        raise UserError(f"output path {target} is a folder; -o takes the file to write")
    if target.exists() or target.is_symlink():
        if not force:
            raise UserError(f"{target} already exists; pass --force to overwrite it")
        if not clean and _schema(target) != schema:
            raise UserError(f"{target} is not a file onnxpart wrote (schema {schema}): --force replaces only "
                            "onnxpart's own output; pass --force --clean to overwrite it, or choose another -o")
        _refuse_same_inode(target, reads)
    _probe(parent, target)


def output_parent(target: Path) -> Path:
    """The folder ``target`` goes into (refused: missing, or ``target`` the current folder or one above, or
    a name longer than the file system takes beside the staging suffix)."""
    parent = target.parent if str(target.parent) else Path(".")
    where, here = Path(os.path.abspath(target)), Path.cwd()
    if where == here or where in here.parents:
        raise UserError(f"-o {target} is the current folder or one above it: name a folder inside it")
    try:
        exists = parent.is_dir()
    except OSError as exc:  # a path component longer than the file system allows
        raise UserError(f"cannot write {_short(target)}: {exc.strerror}") from None
    if not exists:
        raise UserError(f"cannot write {_short(target)}: folder {_short(parent)} does not exist")
    longest = _name_max(parent) - STAGING_CHARS
    if len(os.fsencode(target.name)) > longest:
        raise UserError(f"cannot write {_short(target)}: its name is {len(os.fsencode(target.name))} bytes, and "
                        f"this file system takes {longest} for an output's name (onnxpart writes it under a "
                        f"longer one first, then renames it): choose a shorter -o")
    return parent


#: What the staging names add to an output's name (``.NAME.old.XXXXXXXX`` folders, ``.NAME.XXXXXXXX.tmp``
#: files: :mod:`onnxpart.files`).
STAGING_CHARS = 16


def _name_max(folder: Path) -> int:
    """The longest file name ``folder``'s file system takes (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _short(path: Path) -> str:
    """``path`` for a message: whole, or its first and last characters when it is long."""
    text = str(path)
    return text if len(text) <= 80 else f"{text[:40]}...{text[-30:]}"


def _locations(path: Path) -> set[Path]:
    """Where ``path`` is on disk: its own entry (parent folders resolved) and, for a symlink, what it
    points to (fully resolved)."""
    return {Path(os.path.realpath(path.parent)) / path.name, Path(os.path.realpath(path))}


def _refuse_overlap(target: Path, reads: list[Path]) -> None:
    """An output that is an input, or a folder above one, would remove or overwrite it."""
    outs = _locations(target)
    for read in reads:
        places = _locations(read)
        if outs & places:
            raise UserError(f"-o {target} is {read}, which this run reads: choose another output")
        if any(out in place.parents for out in outs for place in places):
            raise UserError(f"-o {target} holds {read}, which this run reads: replacing the folder would remove "
                            "it; choose another output folder")


def _refuse_replacing(target: Path, entries: list[str], force: bool, clean: bool) -> None:
    """A non-empty folder is replaced only with --force, and only with --clean too unless onnxpart wrote
    it (it holds onnxpart's certificate.json)."""
    if not force:
        raise UserError(f"output folder {target} already exists; pass --force to replace it")
    if clean or _schema(target / CERTIFICATE, prefix=True) == "onnxpart.certificate/":
        return
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    raise UserError(f"output folder {target} holds files onnxpart did not write ({shown}): --force replaces "
                    "only an earlier onnxpart output; pass --force --clean to delete it and write there, or "
                    "choose another folder")


def _refuse_hard_links(target: Path, reads: list[Path]) -> None:
    """A file in the folder being replaced that is an input under another name (a hard link)."""
    inputs = _identities(reads)
    if not inputs:
        return
    for root, _dirs, files in os.walk(target):
        for path in (Path(root) / name for name in files):
            read = inputs.get(_identity(path, follow=False))
            if read is not None:
                raise UserError(f"output folder {target} holds {path}, a hard link to {read}, which this run "
                                "reads: replacing the folder would remove it; choose another output folder")


def _refuse_same_inode(target: Path, reads: list[Path]) -> None:
    read = _identities(reads).get(_identity(target, follow=True))
    if read is not None:
        raise UserError(f"-o {target} is {read} (a hard link), which this run reads: choose another output")


def _identities(reads: list[Path]) -> dict[tuple[int, int], Path]:
    """(device, inode) -> path of every input that is a file."""
    found = {}
    for read in reads:
        if read.is_file():
            found.setdefault(_identity(read, follow=True), read)
    return found


def _identity(path: Path, follow: bool) -> tuple[int, int] | None:
    try:
        stat = os.stat(path, follow_symlinks=follow)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _schema(path: Path, prefix: bool = False) -> str | None:
    """The ``schema`` of a JSON file (up to its last ``/`` with ``prefix``); None for anything else."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str):
        return None
    return schema[:schema.rfind("/") + 1] if prefix else schema


def _probe(parent: Path, target: Path) -> None:
    """Create and remove a folder beside ``target``: the staging and the rename need exactly that."""
    try:
        shutil.rmtree(tempfile.mkdtemp(prefix=f".{Path(os.path.abspath(target)).name}.probe.", dir=parent))
    except OSError as exc:
        raise UserError(f"cannot write in {parent}: {exc.strerror or exc}") from None
