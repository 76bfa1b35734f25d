"""Writing ONNX files that can always be read back, whatever the size of their weights.

Protobuf caps a message at 2 GiB, and ``SerializeToString`` of a larger model can *succeed* and produce a
file neither ``onnx.load`` nor onnxruntime parses. So every model onnxpart emits goes through
:func:`write_model`:

* a model whose weights exceed the :class:`WeightPolicy` threshold — or any model when the input used
  external data, unless it has no tensor to move out — is written as ``NAME.onnx`` + ``NAME.onnx.data``:
  each tensor of at least ``tensor_threshold`` bytes is *streamed* into the data file in bounded chunks,
  straight from the input's data file (or from the protobuf's inline bytes), at a 4 KiB-aligned offset;
  all-zero chunks are skipped with a seek, so a sparse input stays sparse;
* any other model is one protobuf, its external weights (an input's data file, or the embedded weights
  loading left in the input file, :mod:`onnxpart.onnx_wire`) streamed into it the same way as it is
  written (:func:`write_protobuf`);
* the protobuf must be under 2 GiB, or nothing is written;
* both files are written to temporary names, flushed and renamed, so an error, Ctrl-C or a full disk
  leaves nothing behind; then the result is checked with ``onnx.checker.check_model(path)`` (the path
  form, which follows external data; a protobuf that weights were streamed into, on its copy with them
  left in the file).

:func:`link_weights` serves ``annotated.onnx``, which keeps every weight as the input stored it: the
input's data files are cloned into the output folder (copy-on-write where the filesystem can, else a
hole-keeping copy), and the references stay as they are.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from itertools import chain
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import external_data_helper, numpy_helper

from onnxpart import onnx_wire
from onnxpart.dtypes import tensor_bytes
from onnxpart.errors import UserError
from onnxpart.files import fresh_permissions

#: protobuf's hard limit on one message
PROTOBUF_LIMIT = (1 << 31) - 1
CHUNK = 1 << 24  # 16 MiB: the most of a tensor held in memory while streaming it
ALIGNMENT = 4096
FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write (btrfs, xfs, ...)
_ZEROS = memoryview(bytes(CHUNK))  # a view: slicing it for a comparison copies nothing


@dataclass(frozen=True)
class WeightPolicy:
    """When and how emitted models keep their weights outside the protobuf.

    ``source_dir``: the input model's folder (what external-data locations are relative to);
    ``always_external``: the input used external data, so every output does too;
    ``threshold``: a model whose weights exceed this many bytes is written with external data;
    ``tensor_threshold``: with external data, tensors smaller than this stay inline;
    ``source_file``: the input model's file name, where its embedded weights were left (:meth:`embedded`).
    """

    source_dir: Path | None = None
    always_external: bool = False
    threshold: int = 1 << 30
    tensor_threshold: int = 1024
    source_file: str | None = None

    def embedded(self, tensor: onnx.TensorProto) -> bool:
        """Whether ``tensor`` is an embedded weight of the input, which loading left in the input file
        (:mod:`onnxpart.onnx_wire`): its external data is the input file, ``source_file``."""
        return self.source_file is not None and onnx_wire.left_in(tensor, self.source_file)

    def external_for(self, model: onnx.ModelProto) -> bool:
        """Whether ``model`` gets a data file: it has a tensor to move out (:meth:`moves_out`), and the input
        used external data or its weights pass the threshold. (A schedule piece of shape ops alone, of a
        model with external data, is one file, not one and an empty data file: 982 of them on the 70B.)"""
        return (self.always_external or weight_bytes(model) > self.threshold) and any(
            self.moves_out(t) for t in _tensors(model))

    def moves_out(self, tensor: onnx.TensorProto) -> bool:
        """Whether ``tensor`` goes to the data file: it is external, or of ``tensor_threshold`` bytes or more."""
        return (external_data_helper.uses_external_data(tensor)
                or tensor_bytes(tensor.data_type, tensor.dims) >= self.tensor_threshold)


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer (inline or external), from dims and dtype: nothing is read."""
    return sum(tensor_bytes(t.data_type, t.dims) for t in _tensors(model))


def write_model(model: onnx.ModelProto, path: str | os.PathLike, policy: WeightPolicy = WeightPolicy()) -> list[Path]:
    """Write ``model`` to ``path`` (and ``path.data`` when its weights go outside); returns the files.

    ``model`` is not modified. Its external tensors are read from ``policy.source_dir`` in chunks.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: folder {path.parent} does not exist")
    model = _copy(model)
    if not policy.external_for(model):
        _inline_tensors(model, policy.source_dir)
        return [write_protobuf(model, path, policy.source_dir, splice=external_data_helper.uses_external_data)]
    data = path.parent / f"{path.name}.data"
    with _staged(data) as handle:
        _stream_tensors(model, handle, data.name, policy)
    try:
        return [write_protobuf(model, path), data]
    except BaseException:
        _unlink(data)
        raise


def write_annotated(model: onnx.ModelProto, path: str | os.PathLike, policy: WeightPolicy) -> list[Path]:
    """Write an annotated copy of the input model. When the input kept its weights outside
    (``policy.always_external``) every weight stays where it was: the external-data files are linked
    beside it (:func:`link_weights`) and the references left as they are; otherwise it is written like
    any emitted model (:func:`write_model`)."""
    if not policy.always_external:
        return write_model(model, path, policy)
    path = Path(path)
    linked = link_weights(model, policy.source_dir, path.parent, skip=policy.source_file)
    try:
        return [write_protobuf(model, path, policy.source_dir, splice=policy.embedded), *linked]
    except BaseException:
        for file in linked:
            _unlink(file)
        raise


def write_protobuf(model: onnx.ModelProto, path: Path, source_dir: Path | None = None,
                   splice: Callable[[onnx.TensorProto], bool] | None = None) -> Path:
    """Serialize atomically, refusing a protobuf over 2 GiB, and check the file by path (external data
    included): a file that cannot be read back is never left behind.

    The external main-graph initializers ``splice`` picks are written inline, their bytes streamed from
    ``source_dir`` (:func:`_spliced`), and the file is then checked with those bytes left in it
    (:func:`onnxpart.onnx_wire.read_weightless`): neither step holds the weights whole."""
    spliced = {t.name for t in model.graph.initializer
               if splice and external_data_helper.uses_external_data(t) and splice(t)}
    head, tail = _spliced(model, spliced, source_dir)
    size = len(head) + sum(len(prefix) + length for prefix, _, _, length in tail)
    if size > PROTOBUF_LIMIT:
        raise UserError(f"{path.name} would be a {size / 2**30:.2f} GiB protobuf, over protobuf's 2 GiB "
                        "limit; lower --external-data-threshold so its weights go to a data file")
    with _staged(path) as handle:
        handle.write(head)
        for prefix, source, offset, length in tail:
            handle.write(prefix)
            if length:
                with open(source, "rb") as src:
                    _copy_range(src, handle, offset, length)
    try:
        read = onnx_wire.read_weightless(path, 0) if spliced else None
        onnx.checker.check_model(onnx_wire.checkable(read[0]) if read else str(path))
    except Exception as exc:  # a file that cannot be read back is a bug; leave nothing behind
        _unlink(path)
        raise RuntimeError(f"emitted {path.name} fails onnx.checker: {exc}") from exc
    return path


def _spliced(model: onnx.ModelProto, names: set[str], source_dir: Path | None) -> tuple[bytes, list[tuple]]:
    """``model`` serialized as (head, tail): ``tail`` a list of (bytes, source file, offset, length), the
    bytes followed by ``length`` bytes of the source file at ``offset`` (none: length 0). With no name in
    ``names`` the head is the whole model. Otherwise the head holds the model without its initializers
    and the tail adds a second ``graph`` field with them all, in order, each named one inline with its
    ``raw_data`` copied from its external range: protobuf merges a message field given twice, appending
    repeated fields, so the file parses as the model with those tensors inline."""
    if not names:
        return model.SerializeToString(), []
    head = _copy(model)
    del head.graph.initializer[:]
    tail = []
    for tensor in model.graph.initializer:
        if tensor.name not in names:
            body = tensor.SerializeToString()
            tail.append((onnx_wire.field_header(onnx_wire.INITIALIZER, len(body)) + body, None, 0, 0))
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        length = info.length or tensor_bytes(tensor.data_type, tensor.dims)
        inline = onnx.TensorProto()
        inline.CopyFrom(tensor)
        inline.ClearField("data_location")
        del inline.external_data[:]
        body = inline.SerializeToString() + onnx_wire.field_header(onnx_wire.RAW_DATA, length)
        tail.append((onnx_wire.field_header(onnx_wire.INITIALIZER, len(body) + length) + body,
                     _source(source_dir, info.location), info.offset or 0, length))
    graph = sum(len(prefix) + length for prefix, _, _, length in tail)
    tail[0] = (onnx_wire.field_header(onnx_wire.GRAPH, graph) + tail[0][0], *tail[0][1:])
    return head.SerializeToString(), tail


def link_weights(model: onnx.ModelProto, source_dir: Path, target_dir: Path, skip: str | None = None) -> list[Path]:
    """Clone every external-data file ``model`` references from ``source_dir`` into ``target_dir`` under
    the same relative location, so the model's references hold there too (but ``skip``: the input model's
    own file, whose embedded weights are written inline).

    A copy-on-write clone (``FICLONE``) where the filesystem has one, else a chunked copy that keeps
    holes. Not a hard link: ``onnx.checker`` refuses external data with several links (a "hardlink
    attack"), and every emitted file must pass it."""
    done: list[Path] = []
    for location in sorted({external_data_helper.ExternalDataInfo(t).location for t in _tensors(model)
                            if external_data_helper.uses_external_data(t)} - {skip}):
        target = target_dir / location
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(source_dir / location, "rb") as src, _staged(target) as dst:
            if not _reflink(src, dst):
                _copy_range(src, dst, 0, os.fstat(src.fileno()).st_size)
            else:
                dst.seek(0, os.SEEK_END)
        done.append(target)
    return done


def _reflink(src, dst) -> bool:
    try:
        import fcntl

        fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        return True
    except (OSError, ImportError, AttributeError):
        return False


# ----------------------------------------------------------------------------------------- internals
def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Initializers of the graph and of every subgraph (If/Loop/Scan bodies)."""
    for tensor in external_data_helper._get_all_tensors(model):
        if not tensor.HasField("segment"):
            yield tensor


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    clone = onnx.ModelProto()
    clone.CopyFrom(model)
    return clone


def _stream_tensors(model: onnx.ModelProto, handle, data_name: str, policy: WeightPolicy) -> None:
    """Move every tensor of ``tensor_threshold`` bytes or more (and every external one) into ``handle``."""
    offset = 0
    for tensor in _tensors(model):
        if not policy.moves_out(tensor):
            continue
        external = external_data_helper.uses_external_data(tensor)
        offset = -(-offset // ALIGNMENT) * ALIGNMENT
        handle.seek(offset)
        if external:
            info = external_data_helper.ExternalDataInfo(tensor)
            length = info.length or tensor_bytes(tensor.data_type, tensor.dims)
            with open(_source(policy.source_dir, info.location), "rb") as src:
                _copy_range(src, handle, info.offset or 0, length)
        else:
            payload = tensor.raw_data if tensor.HasField("raw_data") else numpy_helper.to_array(tensor).tobytes()
            length = len(payload)
            _write_sparse(handle, payload)
        _point_to(tensor, data_name, offset, length)
        offset += length


def _inline_tensors(model: onnx.ModelProto, source_dir: Path | None) -> None:
    """Read the external tensors of subgraphs and node attributes into the protobuf (used only below the
    size threshold; the main graph's initializers are spliced in as the file is written, :func:`_spliced`)."""
    graphs = (graph for node in model.graph.node for attribute in node.attribute
              for graph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs))
    nested = chain(external_data_helper._get_attribute_tensors(model),
                   *(external_data_helper._get_initializer_tensors_from_graph(graph) for graph in graphs))
    for tensor in nested:
        if external_data_helper.uses_external_data(tensor):
            if source_dir is None:
                raise ValueError(f"tensor {tensor.name!r} is external but no source folder was given")
            external_data_helper.load_external_data_for_tensor(tensor, str(source_dir))
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _source(source_dir: Path | None, location: str) -> Path:
    if source_dir is None:
        raise ValueError(f"external data {location!r} but no source folder was given")
    return source_dir / location


def _point_to(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    tensor.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        tensor.ClearField(field)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _copy_range(src, dst, offset: int, length: int) -> None:
    """Copy ``length`` bytes from ``src`` at ``offset`` to ``dst``'s position, a chunk at a time. The holes
    of a sparse source are found with ``SEEK_DATA`` (where the file system reports them) and skipped
    without being read, so they stay holes: 141 GB of a sparse 70B export copy in seconds."""
    fd = src.fileno()
    end = offset + length
    size = os.fstat(fd).st_size
    if end > size:
        raise UserError(f"{getattr(src, 'name', 'external data')} ended {end - max(size, offset)} bytes early")
    position = offset
    while position < end:
        data = _next_data(fd, position, end)
        if data > position:
            dst.seek(data - position, os.SEEK_CUR)  # a hole: the final truncate fixes the size
            position = data
            continue
        chunk = os.pread(fd, min(CHUNK, end - position), position)
        if not chunk:
            raise UserError(f"{getattr(src, 'name', 'external data')} ended {end - position} bytes early")
        _write_sparse(dst, chunk)
        position += len(chunk)


def _next_data(fd: int, position: int, end: int) -> int:
    """The first offset at or after ``position`` that holds data (``end`` when only a hole is left), or
    ``position`` itself where the file system cannot say."""
    if not hasattr(os, "SEEK_DATA"):
        return position
    try:
        return min(os.lseek(fd, position, os.SEEK_DATA), end)
    except OSError as exc:
        return end if exc.errno == errno.ENXIO else position


def _write_sparse(handle, data: bytes | memoryview) -> None:
    view = memoryview(data)
    for start in range(0, len(view), CHUNK):
        chunk = view[start:start + CHUNK]
        if chunk == _ZEROS[:len(chunk)]:
            handle.seek(len(chunk), os.SEEK_CUR)  # a hole: the final truncate fixes the size
        else:
            handle.write(chunk)


@contextmanager
def _staged(target: Path):
    """A binary handle on a temporary file beside ``target``, renamed over it on success only."""
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
        _unlink(tmp)
        if exc.errno == errno.ENOSPC:
            raise UserError(f"no space left on the device while writing {target.name}; nothing was kept") from None
        raise
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

