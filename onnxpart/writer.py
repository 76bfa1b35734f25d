"""Writing ONNX files that can always be read back, whatever the size of their weights.

Protobuf caps a message at 2 GiB, and ``SerializeToString`` of a larger model can *succeed* and produce a
file neither ``onnx.load`` nor onnxruntime parses. So every model onnxpart emits goes through
:func:`write_model`:

* a model whose weights exceed the :class:`WeightPolicy` threshold — or any model when the input used
  external data, unless it has no tensor to move out — is written as ``NAME.onnx`` + ``NAME.onnx.data``:
  each tensor of at least ``tensor_threshold`` bytes is *streamed* into the data file in bounded chunks,
  straight from the input's data file (or from the protobuf's inline bytes), at a 4 KiB-aligned offset;
  the input's holes are skipped (:mod:`onnxpart.data_files`), so a sparse input stays sparse;
* any other model is one protobuf, its external weights (an input's data file, or the embedded weights
  loading left in the input file, :mod:`onnxpart.onnx_wire`) streamed into it the same way as it is
  written (:func:`write_protobuf`);
* the protobuf must be under 2 GiB, or nothing is written;
* both files are written to temporary names, flushed and renamed, so an error, Ctrl-C or a full disk
  leaves nothing behind; then the result is checked with ``onnx.checker.check_model(path)`` (the path
  form, which follows external data; a protobuf that weights were streamed into, on its copy with them
  left in the file).

How the input's external-data weights reach the outputs is the policy's ``mode`` (``--weights``):

* ``copy`` (the default): each output owns its bytes — ``NAME.onnx.data`` holds the tensors the model
  needs, and ``annotated.onnx`` (:func:`write_annotated`) gets the input's data files cloned whole
  (:mod:`onnxpart.data_files`: reflink where the file system can, else a kernel copy of the data extents
  that keeps holes). Self-contained, and safe against any later edit of the input; checked by path.
* ``link``: every data file of the input is hard-linked into the output folder once, and every model
  keeps the input's references (location, offset, length) into it: no byte is written. ``onnx.checker``
  and ``onnx.load`` refuse, by path, external data with more than one link (their "hardlink attack" rule;
  onnx 1.23 here), so these models are checked as onnx's own loader checks weightless inputs
  (:func:`_check_in_folder`); onnxruntime runs them by path.
* ``reference``: nothing is written but the protobufs; each keeps the input's references, which are
  relative to the *input's* folder, and names that folder (relative to its own) in its metadata
  (:func:`onnxpart.data_files.data_folder`). onnx and onnxruntime (1.23 and 1.32 here) refuse any external data
  outside the model's own folder — ``..``, an absolute path, or a symlink anywhere on the way — so a
  location such as ``../in/model.onnx.data`` would be read by no one; these files are instead complete
  models of the input's folder: run them with that folder as onnxruntime's external-data folder (as
  :func:`onnxpart.runtime.make_session` does), or from a copy of the ``.onnx`` placed there.

Weights embedded in the input model (no data file to share) are copied under every mode.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import onnx
from onnx import external_data_helper, numpy_helper

from onnxpart import onnx_wire
from onnxpart.data_files import FOLDER_KEY, Progress, Tally, clone_file, copy_range, hard_link, write_sparse
from onnxpart.dtypes import tensor_bytes
from onnxpart.errors import UserError
from onnxpart.files import staged, unlink

#: protobuf's hard limit on one message
PROTOBUF_LIMIT = (1 << 31) - 1
ALIGNMENT = 4096
WEIGHT_MODES = ("copy", "link", "reference")


@dataclass(frozen=True)
class WeightPolicy:
    """When and how emitted models keep their weights outside the protobuf.

    ``source_dir``: the input model's folder (what external-data locations are relative to);
    ``always_external``: the input used external data, so every output does too;
    ``threshold``: a model whose weights exceed this many bytes is written with external data;
    ``tensor_threshold``: with external data, tensors smaller than this stay inline;
    ``source_file``: the input model's file name, where its embedded weights were left (:meth:`embedded`);
    ``mode``: how the input's data files reach the outputs (:data:`WEIGHT_MODES`, the module's docstring);
    ``progress``: told how each data file's copy advances (:data:`onnxpart.data_files.Progress`).
    """

    source_dir: Path | None = None
    always_external: bool = False
    threshold: int = 1 << 30
    tensor_threshold: int = 1024
    source_file: str | None = None
    mode: str = "copy"
    progress: Progress | None = dataclasses.field(default=None, compare=False, repr=False)

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

    def keeps(self, tensor: onnx.TensorProto) -> bool:
        """Whether ``tensor`` keeps the input's reference, its bytes neither copied nor moved: a weight in
        one of the input's data files (not embedded in the input model) under ``link`` or ``reference``."""
        return (self.mode != "copy" and external_data_helper.uses_external_data(tensor)
                and not self.embedded(tensor))

    def moves_out(self, tensor: onnx.TensorProto) -> bool:
        """Whether ``tensor`` goes to the data file: it is external, or of ``tensor_threshold`` bytes or more."""
        return (external_data_helper.uses_external_data(tensor)
                or tensor_bytes(tensor.data_type, tensor.dims) >= self.tensor_threshold)


def weight_mode(mode: str) -> str:
    """``mode`` (``--weights``) if it is one of :data:`WEIGHT_MODES`, else a :class:`UserError` naming them."""
    if mode not in WEIGHT_MODES:
        raise UserError(f"--weights {mode}: use {', '.join(WEIGHT_MODES[:-1])} or {WEIGHT_MODES[-1]}")
    return mode


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer (inline or external), from dims and dtype: nothing is read."""
    return sum(tensor_bytes(t.data_type, t.dims) for t in _tensors(model))


def write_model(model: onnx.ModelProto, path: str | os.PathLike, policy: WeightPolicy = WeightPolicy()) -> list[Path]:
    """Write ``model`` to ``path`` (and ``path.data`` when weights it owns go outside); returns the files.

    ``model`` is not modified. Its external tensors are read from ``policy.source_dir``, copied in
    chunks, or kept where they are by ``policy.mode`` (:meth:`WeightPolicy.keeps`).
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"cannot write {path}: folder {path.parent} does not exist")
    model = _copy(model)
    if policy.mode == "reference" and policy.always_external:
        return [_write_referencing(model, path, policy)]
    if not policy.external_for(model):
        _inline_tensors(model, policy.source_dir)
        return [write_protobuf(model, path, policy.source_dir, splice=external_data_helper.uses_external_data)]
    linked = _materialize(model, policy, path.parent, hard_link, policy.keeps)
    moved = [t for t in _tensors(model) if policy.moves_out(t) and not policy.keeps(t)]
    data = path.parent / f"{path.name}.data"
    if moved:
        with staged(data) as handle:
            _stream_tensors(moved, handle, data.name, policy)
    try:
        return [write_protobuf(model, path, check_in=path.parent if linked else None),
                *([data] if moved else []), *linked]
    except BaseException:
        unlink(data)
        raise


def write_annotated(model: onnx.ModelProto, path: str | os.PathLike, policy: WeightPolicy) -> list[Path]:
    """Write an annotated copy of the input model. When the input kept its weights outside
    (``policy.always_external``) every weight stays where it was: under ``copy`` the input's data files
    are cloned beside it (:func:`onnxpart.data_files.clone_file`) and the references left as they are;
    under ``link`` and ``reference``, and for an input with embedded weights, it is written like any
    emitted model (:func:`write_model`)."""
    if not policy.always_external or policy.mode != "copy":
        return write_model(model, path, policy)
    path = Path(path)
    cloned = _materialize(model, policy, path.parent, lambda source, target: clone_file(
        source, target, policy.progress), lambda t: not policy.embedded(t))
    try:
        return [write_protobuf(model, path, policy.source_dir, splice=policy.embedded), *cloned]
    except BaseException:
        for file in cloned:
            unlink(file)
        raise


def _write_referencing(model: onnx.ModelProto, path: Path, policy: WeightPolicy) -> Path:
    """``--weights reference``: ``model`` keeps the input's references, relative to the input's folder,
    whose path relative to ``path``'s folder is written in its metadata (:data:`FOLDER_KEY`); the input's
    embedded weights are written inline (:func:`write_protobuf`'s splice)."""
    folder = Path(os.path.relpath(policy.source_dir, path.parent)).as_posix()
    entries = [entry for entry in model.metadata_props if entry.key != FOLDER_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(entries)
    model.metadata_props.add(key=FOLDER_KEY, value=folder)
    return write_protobuf(model, path, policy.source_dir, splice=policy.embedded, check_in=policy.source_dir)


def write_protobuf(model: onnx.ModelProto, path: Path, source_dir: Path | None = None,
                   splice: Callable[[onnx.TensorProto], bool] | None = None,
                   check_in: Path | None = None) -> Path:
    """Serialize atomically, refusing a protobuf over 2 GiB, and check the file (external data included):
    a file that cannot be read back is never left behind. ``check_in``: the folder of its external data
    when the checker cannot follow it by path (:func:`_check_in_folder`).

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
    with staged(path) as handle:
        handle.write(head)
        for prefix, source, offset, length in tail:
            handle.write(prefix)
            if length:
                with open(source, "rb") as src:
                    copy_range(src, handle, offset, length)
    try:
        if check_in is not None:
            _check_in_folder(path, check_in)
        else:
            read = onnx_wire.read_weightless(path, 0) if spliced else None
            onnx.checker.check_model(onnx_wire.checkable(read[0]) if read else str(path))
    except Exception as exc:  # a file that cannot be read back is a bug; leave nothing behind
        unlink(path)
        raise RuntimeError(f"emitted {path.name} fails onnx.checker: {exc}") from exc
    return path


def _check_in_folder(path: Path, folder: Path) -> None:
    """Check a written model whose external data ``onnx.checker`` will not follow by path (hard-linked, or
    in the input's ``folder``) as onnxpart checks a weightless input: the model by the checker, its
    external tensors as typed graph inputs (:func:`onnxpart.onnx_wire.checkable`), and every reference —
    inside ``folder``, a regular file there, its range within it — apart
    (:func:`onnxpart.onnx_io.check_external_data`)."""
    from onnxpart.onnx_io import check_external_data

    read = onnx_wire.read_weightless(path, 0)
    written = read[0] if read else onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(onnx_wire.checkable(written))
    check_external_data(written, folder, own=path.name)


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


def _materialize(model: onnx.ModelProto, policy: WeightPolicy, folder: Path,
                 make: Callable[[Path, Path], Path], picked: Callable[[onnx.TensorProto], bool]) -> list[Path]:
    """``make(source, target)`` for every data file of the input that a ``picked`` external tensor of
    ``model`` references, ``target`` at the same location in ``folder`` (so the references hold there):
    a clone (:func:`onnxpart.data_files.clone_file`) or a hard link (:func:`~onnxpart.data_files.hard_link`)."""
    done: list[Path] = []
    for location in sorted({external_data_helper.ExternalDataInfo(t).location for t in _tensors(model)
                            if external_data_helper.uses_external_data(t) and picked(t)}):
        target = folder / location
        target.parent.mkdir(parents=True, exist_ok=True)
        done.append(make(_source(policy.source_dir, location), target))
    return done


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


def _stream_tensors(tensors: list[onnx.TensorProto], handle, data_name: str, policy: WeightPolicy) -> None:
    """Write ``tensors`` into ``handle`` (at 4 KiB-aligned offsets) and point each at its bytes there."""
    offset = 0
    with Tally(policy.progress, data_name, sum(_length(t) for t in tensors)) as tally:
        for tensor in tensors:
            offset = -(-offset // ALIGNMENT) * ALIGNMENT
            handle.seek(offset)
            length = _length(tensor)
            if external_data_helper.uses_external_data(tensor):
                info = external_data_helper.ExternalDataInfo(tensor)
                with open(_source(policy.source_dir, info.location), "rb") as src:
                    copy_range(src, handle, info.offset or 0, length, tally)
            else:
                payload = tensor.raw_data if tensor.HasField("raw_data") else numpy_helper.to_array(tensor).tobytes()
                length = len(payload)
                write_sparse(handle, payload)
                tally.advance(length)
            _point_to(tensor, data_name, offset, length)
            offset += length


def _length(tensor: onnx.TensorProto) -> int:
    """The bytes of ``tensor``'s data: its external length, its ``raw_data``, or what dims and dtype say."""
    if external_data_helper.uses_external_data(tensor):
        length = external_data_helper.ExternalDataInfo(tensor).length
        return length or tensor_bytes(tensor.data_type, tensor.dims)
    return len(tensor.raw_data) if tensor.HasField("raw_data") else tensor_bytes(tensor.data_type, tensor.dims)


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
