"""onnxruntime's BASIC graph optimizations as a pre-pass (``onnxpart remat --ort-optimize``): the optimized
copy of a model file (the I/O side; what remat does with it is :mod:`onnxpart.remat.prepass`).

A rematerialized model must run with onnxruntime's optimizations off (they would merge the recomputed
clones back), so a user who normally lets onnxruntime optimize loses those optimizations. The pre-pass
applies them *before* planning: the plan, and ``remat.onnx``, are then for the optimized graph.

``GraphOptimizationLevel.ORT_ENABLE_BASIC`` is semantics-preserving and provider-independent: constant
folding, redundant node elimination (Identity, Dropout in inference, duplicate subexpressions...) and
fusions that keep standard ONNX ops (Conv+BatchNormalization, Conv+Add, Conv+Mul...). EXTENDED and the
layout level are not used: they emit contrib ops (``com.microsoft`` FusedConv, FusedGemm, ...) and
layout-specific kernels (NCHWc) that only the provider they were optimized for can run, which onnxpart's
cost models and ONNX shape inference cannot see into, and which would tie ``remat.onnx`` to one
onnxruntime build. If the optimizer nevertheless emits ops from a domain the input model does not use,
the pre-pass refuses (a :class:`UserError`) rather than plan a non-standard model.

The optimized file is written by onnxruntime itself (``SessionOptions.optimized_model_filepath``, weights
as external data beside it) into a temporary folder that is always removed; the input model is only
read. It is then made a valid model of IR version ≥ 4: onnxruntime keeps an IR-3 model's version but
neither lists the weights it creates (folded constants, fused Conv weights) as graph inputs, as IR 3
requires, nor drops the inputs of the weights it folded away.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx

from onnxpart.errors import UserError
from onnxpart.onnx_graph import subgraphs
from onnxpart.onnx_io import read_proto

LEVEL = "ORT_ENABLE_BASIC"
#: Domains of the ONNX standard operators; any other domain the optimizer adds is refused.
STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
OPTIMIZED_NAME = "optimized.onnx"


@contextmanager
def ort_optimized(path: str | Path) -> Iterator[Path]:
    """The path of a BASIC-optimized copy of the model at ``path``, valid inside the ``with`` block.

    ``path`` should already have passed :func:`onnxpart.onnx_io.read_model` (which confines its external
    data to its folder). Raises :class:`UserError` if onnxruntime cannot load the model or the optimized
    graph uses a domain outside the standard ONNX ones that the input did not already use.
    """
    with tempfile.TemporaryDirectory(prefix="onnxpart-ort-optimize-") as folder:
        target = Path(folder) / OPTIMIZED_NAME
        original, embedded = read_proto(Path(path))  # embedded weights left in the file
        run_basic_optimizer(Path(path), target, original if embedded else None)
        optimized = onnx.load(str(target), load_external_data=False)
        refuse_new_domains(original, optimized)
        make_valid(optimized, original)
        target.write_bytes(optimized.SerializeToString())
        yield target


def run_basic_optimizer(source: Path, target: Path, weightless: onnx.ModelProto | None = None) -> None:
    """Let onnxruntime (CPU provider) optimize ``source`` at the BASIC level and save it as ``target``.
    ``weightless``: ``source`` read with its embedded weights left in it (:func:`onnxpart.onnx_io.read_proto`),
    given to onnxruntime instead, which then reads them from the file (1.1 GB peak instead of 2.0 GB for the
    0.95 GB transformer: parsed whole, they are in the protobuf and again in onnxruntime's tensors)."""
    import onnxruntime as ort

    from onnxpart.runtime import ort_reason

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    # Weights beside the model, not inside it: a protobuf file is capped at 2 GiB.
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                     f"{target.name}.data")
    model = str(source)
    if weightless is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(source.parent))
        model = weightless.SerializeToString()
    try:
        ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
        raise UserError(f"--ort-optimize: onnxruntime cannot load {source} ({ort_reason(exc)})") from None


def node_domains(model: onnx.ModelProto) -> dict[str, set[str]]:
    """Domain -> op types of every node, subgraphs and local functions included."""
    found: dict[str, set[str]] = {}
    for node in _all_nodes(model):
        found.setdefault(node.domain, set()).add(node.op_type)
    return found


def refuse_new_domains(original: onnx.ModelProto, optimized: onnx.ModelProto) -> None:
    """Raise :class:`UserError` naming the ops of any non-standard domain the optimizer introduced."""
    allowed = STANDARD_DOMAINS | set(node_domains(original))
    new = {domain: ops for domain, ops in node_domains(optimized).items() if domain not in allowed}
    if new:
        listed = ", ".join(f"{domain}:{op}" for domain in sorted(new) for op in sorted(new[domain]))
        raise UserError(f"--ort-optimize: onnxruntime's {LEVEL} optimizer emitted non-standard ops ({listed}); "
                        f"onnxpart cannot cost them and remat.onnx would run only in this onnxruntime build "
                        f"— run without --ort-optimize")


def make_valid(optimized: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """In place: IR version ≥ 4 with the original's graph inputs, and only the opset imports in use."""
    before = {init.name for init in original.graph.initializer}
    after = {init.name for init in optimized.graph.initializer}

    def user_input(name: str) -> bool:
        if name in before and name not in after:
            return False  # a weight the optimizer folded away: its input entry is stale
        return not (name in after and original.ir_version < 4)  # IR 3 lists every weight as an input

    inputs = [vi for vi in optimized.graph.input if user_input(vi.name)]
    del optimized.graph.input[:]
    optimized.graph.input.extend(inputs)
    optimized.ir_version = max(optimized.ir_version, 4)
    _prune_opset_imports(optimized, original)


def _prune_opset_imports(optimized: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """onnxruntime imports every domain it knows (com.microsoft, nchwc...); keep the original's and the
    ones nodes use."""
    keep = {entry.domain for entry in original.opset_import} | set(node_domains(optimized))
    imports = [entry for entry in optimized.opset_import if entry.domain in keep]
    del optimized.opset_import[:]
    optimized.opset_import.extend(imports)


def _all_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    graphs = [model.graph]
    for function in model.functions:
        yield from function.node
    while graphs:
        for node in graphs.pop().node:
            yield node
            graphs.extend(subgraphs(node))
