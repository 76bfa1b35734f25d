"""From a file to a costed graph: what every command does first (and the emission policy it implies).

* :func:`load_costed` — a model or a graph file to a costed :class:`~onnxpart.graph.OpGraph`. Graph files
  (costs, dnn-partitioning, node-link) go through :func:`onnxpart.readers.read_graph`; models through
  :func:`onnxpart.onnx_io.load_graph`, keeping the model for emission, costed by ``--costs`` or the
  ``--cost`` model.
* :func:`weight_policy` — how emitted models store their weights (``--external-data-threshold``) and get
  the input's (``--weights``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from onnxpart.errors import UserError


@dataclass
class Loaded:
    """A costed graph, and the ONNX model it came from (None for graph-only input)."""

    graph: Any  # OpGraph
    model: Any  # LoadedModel | None
    source: Path
    measured_end_to_end: float | None = None  # --cost measured: the model's run, profiler off
    measured_kernel_total: float | None = None  # --cost measured: its profiled kernels' sum


def load_costed(path: Path, *, fmt: str = "auto", input_shape: Optional[list[str]] = None, coarsen: bool = False,
                costs: Optional[Path] = None, cost: str = "analytic", device: str = "a100",
                need_model: bool = False, dim: Optional[list[str]] = None, force_shape: bool = False,
                profiling=None) -> Loaded:
    """Model or graph file -> costed OpGraph. Graph files (``--format``, or by suffix and content: costs,
    dnn-partitioning, node-link) go through :func:`onnxpart.readers.read_graph`; models are loaded here,
    which keeps the model for emission and applies ``--costs`` or the ``--cost`` model. ``force_shape``
    (``--force-shape``) lets ``input_shape`` replace dims the model fixes; ``profiling``: how ``--cost measured``
    profiles (:class:`onnxpart.cost_models.measured.Profiling`; None: its defaults)."""
    from onnxpart.costs_io import apply_costs, read_costs_file
    from onnxpart.onnx_io import load_graph, parse_dims, parse_input_shapes
    from onnxpart.readers import read_graph, reads_model

    if not reads_model(path, fmt):
        if need_model:
            raise UserError(f"{path} is a graph file: this command needs the ONNX model")
        return Loaded(read_graph(path, fmt), None, path)
    graph, loaded = load_graph(path, parse_input_shapes(input_shape or [], force_shape), coarsen=coarsen,
                               dims=parse_dims(dim or []))
    if costs is not None:
        return Loaded(apply_costs(graph, read_costs_file(costs), source=str(costs)), loaded, path)
    return cost_graph(graph, loaded, path, cost, device, profiling)


def cost_graph(graph, loaded, path: Path, cost: str, device: str, profiling=None) -> Loaded:
    from onnxpart.cost_models import analytic_costs, load_device

    if cost == "analytic":
        return Loaded(analytic_costs(graph, load_device(device)), loaded, path)
    if cost == "measured":
        from onnxpart.cost_models.measured import Profiling, measured_costs

        spec = load_device(device)
        result = measured_costs(graph.replace(bandwidth=spec.interconnect_bandwidth), loaded,
                                profiling or Profiling())
        return Loaded(result.graph, loaded, path, measured_end_to_end=result.end_to_end,
                      measured_kernel_total=result.kernel_total)
    raise UserError(f"unknown cost model {cost!r}: use analytic or measured")


def weight_policy(loaded, threshold: Optional[str], mode: str = "copy", output: Optional[Path] = None,
                  progress=None):
    """How emitted models store their weights (``--external-data-threshold``, default 1 GiB) and get the
    input's data files (``mode``: ``--weights``, :data:`onnxpart.writer.WEIGHT_MODES`); ``progress`` is
    told how copies advance. ``link`` into an ``output`` on another file system than the input is refused
    here, before any work: hard links cannot cross file systems."""
    from onnxpart.data_files import same_file_system
    from onnxpart.units import parse_bytes
    from onnxpart.writer import WeightPolicy, weight_mode

    limit = int(parse_bytes(threshold, "--external-data-threshold")) if threshold is not None else WeightPolicy.threshold
    policy = WeightPolicy(source_dir=loaded.folder, always_external=loaded.uses_external_data, threshold=limit,
                          source_file=loaded.path.name, mode=weight_mode(mode), progress=progress)
    if mode == "link" and policy.always_external and output is not None:
        existing = next(folder for folder in (Path(output), *Path(output).absolute().parents) if folder.exists())
        if not same_file_system(loaded.folder, existing):
            raise UserError(f"--weights link: {output} is on another file system than {loaded.folder}, and hard "
                            "links cannot cross file systems; use --weights copy or reference")
    return policy
