"""Embedded weights left in the file: an ONNX file read without the bytes of its large initializers.

``onnx.load`` of a model whose weights are embedded (not external data) holds them twice while it parses
(the file's bytes and the protobuf: 1.9 GB for a 0.95 GB file), and ``onnx.checker.check_model(path)``
does the same. Planning needs none of those bytes, and emission only copies them. So the file is read on
demand (:class:`FileBytes`, never whole) and its protobuf wire format walked just deep enough to find each
initializer's ``raw_data`` — ``ModelProto.graph`` (field 7) → ``GraphProto.initializer`` (field 5) →
``TensorProto.raw_data`` (field 9), field numbers of ``onnx.proto`` — and what is parsed is a copy with
every ``raw_data`` over a size cut out and replaced by an external-data reference to its own byte range
of the model file (``location`` the file's name, ``offset``, ``length``). From there the weights are
external data like any other: the writer copies those ranges into the outputs
(:mod:`onnxpart.writer`) and onnxruntime reads them from the file.

Only the main graph's initializers are cut (a subgraph's, or a ``Constant``'s, stay in memory: they are
small in the models seen), and only a ``raw_data`` whose length is exactly its tensor's: anything else is
left for ``onnx.checker`` to judge. Typed fields (``float_data`` …) stay in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx

from onnxpart.dtypes import tensor_bytes

GRAPH, INITIALIZER, RAW_DATA = 7, 5, 9  # ModelProto.graph, GraphProto.initializer, TensorProto.raw_data
METADATA = 14  # ModelProto.metadata_props
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5  # wire types


class FileBytes:
    """The bytes of an open file, indexed and sliced like ``bytes`` but read on demand with ``os.pread``
    through a small window. Not ``mmap``: the kernel maps page-cache folios whole (up to 2 MiB a fault),
    so walking the headers of a mapped 0.95 GB file counts nearly all of it in the process's peak RSS."""

    WINDOW = 1 << 16

    def __init__(self, fd: int):
        self.fd, self.size = fd, os.fstat(fd).st_size
        self.start, self.window = 0, b""

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop = key.start, min(key.stop, self.size)
            if self.start <= start and stop <= self.start + len(self.window):
                return self.window[start - self.start:stop - self.start]
            return os.pread(self.fd, stop - start, start)
        if not self.start <= key < self.start + len(self.window):
            self.start, self.window = key, os.pread(self.fd, self.WINDOW, key)
        return self.window[key - self.start]


class WireError(ValueError):
    """Bytes that are not a protobuf message this module can walk."""


def read_weightless(path: Path, keep: int) -> tuple[onnx.ModelProto, int] | None:
    """The model in ``path`` with every main-graph initializer's ``raw_data`` over ``keep`` bytes left in
    the file (an external-data reference to its range of ``path`` instead), and how many were cut; None
    when the file is not a protobuf the walk understands (the caller parses it the usual way, to report
    the usual error). Memory: the file's bytes less the cut ones."""
    with open(path, "rb") as handle:
        buffer = FileBytes(handle.fileno())
        if not len(buffer):
            return None
        try:
            data, cut = _weightless_model(buffer, path.name, keep)
        except WireError:
            return None
    try:
        return onnx.ModelProto.FromString(data), cut
    except Exception:  # noqa: BLE001 - DecodeError and friends: let onnx.load report it
        return None


def _weightless_model(buffer, location: str, keep: int) -> tuple[bytes, int]:
    parts, cut = [], 0
    for field, wire, start, body, end in fields(buffer, 0, len(buffer)):
        if field == GRAPH and wire == _LENGTH:
            graph, n = _weightless_graph(buffer, body, end, location, keep)
            parts.append(field_header(GRAPH, len(graph)) + graph)
            cut += n
        else:
            parts.append(buffer[start:end])
    return b"".join(parts), cut


def _weightless_graph(buffer, begin: int, stop: int, location: str, keep: int) -> tuple[bytes, int]:
    parts, cut = [], 0
    for field, wire, start, body, end in fields(buffer, begin, stop):
        tensor = _weightless_tensor(buffer, body, end, location, keep) if (
            field == INITIALIZER and wire == _LENGTH) else None
        if tensor is None:
            parts.append(buffer[start:end])
        else:
            parts.append(field_header(INITIALIZER, len(tensor)) + tensor)
            cut += 1
    return b"".join(parts), cut


def _weightless_tensor(buffer, begin: int, stop: int, location: str, keep: int) -> bytes | None:
    """The TensorProto at ``buffer[begin:stop]`` with its ``raw_data`` replaced by a reference to that
    range of the file ``location``; None to keep it as it is (small, no ``raw_data``, or one whose length
    is not its tensor's: the checker's to report)."""
    raw, rest = [], []
    for field, wire, start, body, end in fields(buffer, begin, stop):
        if field == RAW_DATA and wire == _LENGTH:
            raw.append((body, end - body))
        else:
            rest.append(buffer[start:end])
    if len(raw) != 1 or raw[0][1] <= keep:
        return None
    offset, length = raw[0]
    tensor = onnx.TensorProto.FromString(b"".join(rest))
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor_bytes(tensor.data_type, tensor.dims) != length:
        return None
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor.SerializeToString()


def metadata(path: Path) -> dict[str, str]:
    """The model's ``metadata_props`` (field 14 of ``ModelProto``), read without parsing its graph (which is
    skipped by its length, never read); empty for a file that is not a protobuf this module can walk."""
    found: dict[str, str] = {}
    with open(path, "rb") as handle:
        buffer = FileBytes(handle.fileno())
        try:
            for field, wire, _, body, end in fields(buffer, 0, len(buffer)):
                if field == METADATA and wire == _LENGTH:
                    entry = onnx.StringStringEntryProto.FromString(buffer[body:end])
                    found[entry.key] = entry.value
        except (WireError, ValueError, IndexError):  # DecodeError is a ValueError
            return {}
    return found


def left_in(tensor: onnx.TensorProto, file_name: str) -> bool:
    """Whether ``tensor`` is an embedded weight that :func:`read_weightless` left in the file ``file_name``
    (its external data is that file)."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        entry.key == "location" and entry.value == file_name for entry in tensor.external_data)


def fields(buffer, begin: int, stop: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of the message at ``buffer[begin:stop]``: (number, wire type, start of its key, start of
    its value (a length-delimited one's bytes), end)."""
    position = begin
    while position < stop:
        key, body = _varint(buffer, position)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            end = _varint(buffer, body)[1]
        elif wire in (_FIXED64, _FIXED32):
            end = body + (8 if wire == _FIXED64 else 4)
        elif wire == _LENGTH:
            length, body = _varint(buffer, body)
            end = body + length
        else:
            raise WireError(f"wire type {wire} (groups) at byte {position}")
        if not field or end > stop:
            raise WireError(f"field {field} at byte {position} runs past its message")
        yield field, wire, position, body, end
        position = end


def _varint(buffer, position: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``position``."""
    value = shift = 0
    while shift < 64:
        if position >= len(buffer):
            raise WireError("truncated varint")
        byte = buffer[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return value, position
        shift += 7
    raise WireError("varint longer than 10 bytes")


def field_header(field: int, length: int) -> bytes:
    """The key and length of a length-delimited field of ``length`` bytes."""
    return encode_varint(field << 3 | _LENGTH) + encode_varint(length)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for ``onnx.checker.check_model`` in memory, whose external tensors (the weights
    :func:`read_weightless` left in the file among them) are typed graph inputs instead: given a model
    rather than a path, the checker looks for external data in the working folder. The weights left in
    the file had their lengths checked as they were cut; external data files are checked apart
    (:func:`onnxpart.onnx_io.check_external_data`); the rest of the model is checked as it is."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    listed = {vi.name for vi in graph.input}
    kept = []
    for tensor in graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            kept.append(tensor)
        elif tensor.name not in listed:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return out
