"""The models of a sweep, checked before any job starts, and the files each one is made of (what travels
to a Ray worker that does not share the filesystem)."""

from __future__ import annotations

from pathlib import Path

from onnxpart.errors import UserError


def model_files(path: Path) -> list[Path]:
    """Check that ``path`` loads — an ONNX model (protobuf with a graph, external data inside its folder
    and complete) or a graph file onnxpart reads — without reading weights; -> the model file and its
    external-data files."""
    from onnx import external_data_helper

    from onnxpart.onnx_io import check_external_data, read_proto
    from onnxpart.readers import read_graph, reads_model

    if not reads_model(path):
        read_graph(path)
        return [path]
    model, _ = read_proto(path)  # embedded weights left in the file: references to it
    if not model.graph.node and not model.graph.output:
        raise UserError(f"{path} is not an ONNX model: it has no graph (empty, truncated or another format)")
    check_external_data(model, path.parent, own=path.name)
    locations = {external_data_helper.ExternalDataInfo(tensor).location
                 for tensor in external_data_helper._get_all_tensors(model)
                 if external_data_helper.uses_external_data(tensor)} - {path.name}
    return [path, *(path.parent / location for location in sorted(locations))]
