"""Shapes of every tensor of a real export, without reading its weights.

ONNX shape inference alone leaves many tensors of real exports unknown:

* legacy TorchScript exports compute shapes in subgraphs of constants (``Where(Equal(ConstantOfShape …))``
  feeding ``Expand``, ``Reshape(Mod(…))`` feeding a ``Slice`` end) that inference does not evaluate, even
  with data propagation;
* exports with dynamic axes compute shapes at run time (``Shape → Gather → Unsqueeze → Concat →
  Reshape``), which stay unknown until the graph inputs are static *and* ``Shape`` of a known shape is
  read as a constant.

:func:`resolve` iterates the general mechanism — fold constant-only nodes (small outputs only), run ONNX
inference with data propagation, read ``Shape`` of a statically shaped tensor as a constant, repeat to
a fix-point — and then asks onnxruntime's symbolic shape inference for what is left. It works on a
*skeleton* of the model (:func:`skeleton`): large initializers become typed graph inputs, so no weight
is read, copied or serialized, and a large weight can never be an input of a shape computation.

The folding is onnx-graphsurgeon's ``fold_constants`` (it evaluates constant subgraphs in onnxruntime and
folds ``Shape`` nodes of static tensors); the folded model is only ever used to learn shapes, never
emitted.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import external_data_helper, shape_inference

from onnxpart.dtypes import dtype_name
from onnxpart.errors import UserError

log = logging.getLogger(__name__)

#: constant tensors up to this size stay in the skeleton and may be folded (shape vectors, masks…)
SMALL_CONSTANT_BYTES = 1 << 16
#: fix-point rounds of fold + infer before the symbolic fallback
MAX_ROUNDS = 8


@dataclass(frozen=True)
class ValueType:
    """Element type and dims of a value; ``None`` dims: rank unknown; a dim of -1: unknown."""

    elem_type: int
    dims: tuple[int, ...] | None

    @property
    def static(self) -> bool:
        return self.elem_type != 0 and self.dims is not None and -1 not in self.dims


# ------------------------------------------------------------------------------------------ skeleton
def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its weights: nodes, inputs, outputs and value_info as they are; initializers up
    to :data:`SMALL_CONSTANT_BYTES` with inline data kept; every other initializer (large, or in external
    data) becomes a graph input of the same type and dims. Nothing of the weights is read."""
    g = model.graph
    small, typed = [], []
    listed = {vi.name for vi in g.input}
    for init in g.initializer:
        if not external_data_helper.uses_external_data(init) and init.ByteSize() <= SMALL_CONSTANT_BYTES:
            small.append(init)
        elif init.name not in listed:
            typed.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    graph = onnx.helper.make_graph(
        list(g.node), g.name or "model", [vi for vi in g.input] + typed, list(g.output),
        initializer=small, value_info=list(g.value_info))
    out = onnx.helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = max(model.ir_version, 4)
    out.functions.extend(model.functions)
    return out


# ------------------------------------------------------------------------------------- dim overrides
def symbolic_dims(model: onnx.ModelProto) -> dict[str, list[str]]:
    """``{dim_param: [graph inputs carrying it]}`` in input order (weights listed as inputs excluded)."""
    weights = {init.name for init in model.graph.initializer}
    dims: dict[str, list[str]] = {}
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and vi.name not in dims.setdefault(dim.dim_param, []):
                dims[dim.dim_param].append(vi.name)
    return dims


def apply_dims(graph: onnx.GraphProto, dims: Mapping[str, int]) -> None:
    """In place: every dim whose ``dim_param`` is named in ``dims`` becomes that value — in the graph's
    inputs, outputs and value_info (onnxruntime's ``free_dimension_overrides_by_name``)."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in dims:
                dim.dim_value = int(dims[dim.dim_param])


def forced(input_shapes: Mapping[str, Sequence[int]]) -> bool:
    """True when the hints came with ``--force-shape``: they may replace dims the model fixes."""
    return any(getattr(shape, "force", False) for shape in input_shapes.values())


def check_hint(name: str, known: Sequence[int] | None, hint: Sequence[int]) -> None:
    """Refuse an ``--input-shape`` hint of another rank than the model's, or one that replaces a dim the
    model fixes (``known``: -1 where free; None: rank unknown) unless it was given with ``--force-shape``."""
    if known is None:
        return
    if len(known) != len(hint):
        example = "x".join(str(d) if d >= 0 else "1" for d in known)
        raise UserError(f"--input-shape {name}: the model says rank {len(known)}, got {len(hint)} dims "
                        f"(e.g. --input-shape {name}={example})")
    for axis, (fixed, value) in enumerate(zip(known, hint)):
        if fixed >= 0 and fixed != value and not getattr(hint, "force", False):
            raise UserError(f"--input-shape {name}: axis {axis} is {fixed} in the model, not {value}; pass "
                            f"--force-shape to cost {name} at {value} there anyway")


def apply_shape(vi: onnx.ValueInfoProto, shape: Sequence[int]) -> None:
    dims = vi.type.tensor_type.shape.dim
    del dims[:]
    for value in shape:
        dims.add().dim_value = int(value)


# ---------------------------------------------------------------------------------------- inference
def read_types(model: onnx.ModelProto) -> dict[str, ValueType]:
    """The type of every value the model states (inputs, outputs, value_info, initializers, Constants)."""
    g = model.graph
    types: dict[str, ValueType] = {}
    for init in g.initializer:
        types[init.name] = ValueType(init.data_type, tuple(int(d) for d in init.dims))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.name in types or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = (tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else -1 for d in tt.shape.dim)
                if tt.HasField("shape") else None)
        types[vi.name] = ValueType(tt.elem_type, dims)
    for node in g.node:
        if node.op_type == "Constant" and node.output and node.output[0] not in types:
            for attr in node.attribute:
                if attr.name == "value":
                    types[node.output[0]] = ValueType(attr.t.data_type, tuple(int(d) for d in attr.t.dims))
    return types


def _merge(known: dict[str, ValueType], new: Mapping[str, ValueType]) -> int:
    """Keep, per value, the type with the fewest unknowns; return how many values improved."""
    improved = 0
    for name, vt in new.items():
        old = known.get(name)
        if old is None or _unknowns(vt) < _unknowns(old):
            known[name] = vt if vt.elem_type or old is None else ValueType(old.elem_type, vt.dims)
            improved += 1
    return improved


def _unknowns(vt: ValueType) -> int:
    if vt.dims is None:
        return 1000 + (vt.elem_type == 0)
    return sum(d < 0 for d in vt.dims) + (vt.elem_type == 0)


def onnx_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # the model itself is inconsistent
        raise UserError(f"ONNX shape inference failed: {str(exc).splitlines()[0][:200]}") from None


def fold(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, ValueType]]:
    """Fold constant-only nodes with small outputs and ``Shape`` of static tensors (onnx-graphsurgeon);
    also return the types of every value that became a constant (cleanup drops the ones only other
    constants read, but the original model computes them at run time, so their shapes are needed). A
    failure leaves the model as it was: folding is only ever a help to inference."""
    import onnx_graphsurgeon as gs
    import onnxruntime

    gs.logger.G_LOGGER.severity = gs.logger.G_LOGGER.CRITICAL
    onnxruntime.set_default_logger_severity(3)  # graphsurgeon's sessions would warn on stderr
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter):  # graphsurgeon prints; stdout belongs to --json
            graph = gs.import_onnx(model)
            # graphsurgeon's cleanup tests each graph input for membership in a list of every used tensor
            # (O(inputs x tensors): 9 s of a 70B load, whose 723 weights are skeleton inputs); no pass
            # needs them listed (they have no producer), so they are put back only for the export
            inputs, graph.inputs = graph.inputs, []
            graph.fold_constants(fold_shapes=True, size_threshold=SMALL_CONSTANT_BYTES)
            constants = {name: ValueType(onnx.helper.np_dtype_to_tensor_dtype(t.values.dtype), tuple(t.shape))
                         for name, t in graph.tensors().items()
                         if isinstance(t, gs.Constant) and isinstance(t.values, np.ndarray)}
            graph.cleanup().inputs = inputs
            folded = gs.export_onnx(graph, do_type_check=False)
    except Exception as exc:  # noqa: BLE001 - any failure of the helper only means fewer shapes known
        log.debug("constant folding failed: %s", exc)
        return model, {}
    finally:
        if chatter.getvalue():
            log.debug("onnx-graphsurgeon: %s", chatter.getvalue().strip()[:2000])
    folded.ir_version = model.ir_version
    del folded.opset_import[:]
    folded.opset_import.extend(model.opset_import)
    return folded, constants


def ort_symbolic_infer(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """onnxruntime's symbolic shape inference (sympy), or None where it cannot handle the model.

    Its public ``infer_shapes`` saves ``sym_shape_infer_temp.onnx`` into the current folder and raises
    whenever a single shape stays unknown; the same steps are run here without that, so the partial
    result is kept and nothing is written. It needs sympy (a dependency onnxpart declares, which
    onnxruntime does not): imported here first, so a missing one fails loudly instead of reading as
    "this model is beyond symbolic inference"."""
    import sympy  # noqa: F401 - onnxruntime.tools.symbolic_shape_infer imports it

    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_opset

        if (get_opset(model) or 0) < 7:
            return None
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)
        with contextlib.redirect_stdout(io.StringIO()):
            inference._preprocess(model)
            while inference.run_:
                inference._infer_impl()
            inference._update_output_from_vi()
        return inference.out_mp_
    except Exception as exc:  # noqa: BLE001 - the fallback may fail on ops it does not know
        log.debug("symbolic shape inference failed: %s", exc)
        return None


def resolve(model: onnx.ModelProto, dims: Mapping[str, int] | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            prefolded: tuple[onnx.ModelProto, dict[str, ValueType]] | None = None) -> dict[str, ValueType]:
    """Types of every value of ``model`` (a :func:`skeleton`), with ``dims`` fixed by name and
    ``input_shapes`` applied (graph inputs, or internal tensors inference cannot see through).

    Fold, infer, read ``Shape`` of static tensors as constants, repeat until nothing improves; then
    onnxruntime's symbolic inference. A hint on an internal tensor takes its element type from ONNX type
    inference, never a default (a bool mask stays bool).

    ``prefolded``: :func:`fold` of ``model`` as it is, where the caller has it (a dynamic model's
    :func:`symbolic_value_infos` needs it too). What it folds holds at any dims — constant-only subgraphs,
    ``Shape`` of tensors the model fixes — unless ``--force-shape`` replaces fixed dims, so it is not for
    that case. Inference at ``dims`` then starts from it: a model whose shapes wait only on constant
    subgraphs needs no fold of its own, and one that does (``Shape`` of tensors static only at ``dims``)
    folds a model already rid of its constant nodes.
    """
    overrides = (dims or {}, input_shapes or {})
    model = _with_overrides(model, *overrides)
    known: dict[str, ValueType] = {}
    current = onnx_infer(model)
    wanted = _read_values(model)
    _merge(known, read_types(current))
    if prefolded is not None and not _all_static(wanted, known):
        current = onnx_infer(_with_overrides(prefolded[0], *overrides))
        _merge(known, read_types(current))
        _merge(known, prefolded[1])
    for _ in range(MAX_ROUNDS):
        if _all_static(wanted, known):
            break
        folded, constants = fold(current)
        current = onnx_infer(folded)
        improved = _merge(known, read_types(current)) + _merge(known, constants)
        if not improved:
            break
    for candidate in (current, model):  # the folded model first; the original where folding lost a value
        if _all_static(wanted, known):
            break
        symbolic = ort_symbolic_infer(candidate)
        if symbolic is not None:
            _merge(known, read_types(symbolic))
    return known


def check_inference(model: onnx.ModelProto, dims: Mapping[str, int], input_shapes: Mapping[str, Sequence[int]],
                    types: Mapping[str, ValueType]) -> None:
    """The full check of ``onnx.checker`` — strict ONNX type and shape inference, which holds every op to
    its schema's type constraints and shape rules — on ``model`` (a :func:`skeleton`) at the ``dims`` and
    graph-input ``input_shapes`` given, so a MatMul whose inner dims disagree only once ``--dim`` fixes
    them is refused too. The error names the node and its inputs' types (``types``: as resolved). With
    ``--force-shape`` the model is checked as it is written: forced dims may contradict its declarations."""
    inputs = {vi.name for vi in model.graph.input}
    given = {} if forced(input_shapes) else {name: shape for name, shape in input_shapes.items() if name in inputs}
    try:
        shape_inference.infer_shapes(_with_overrides(model, dims, given), check_type=True, strict_mode=True)
    except shape_inference.InferenceError as exc:
        raise UserError(_inference_refusal(str(exc), model, types)) from None


#: how strict inference names the node it refuses: ``(op_type:MatMul, node name: mm): reason``
_REFUSED_NODE = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\): (?:\[\w+\] )?(.*)")


def _inference_refusal(error: str, model: onnx.ModelProto, types: Mapping[str, ValueType]) -> str:
    """One line for a strict-inference error: the node, its inputs' element types and shapes, the reason."""
    text = " ".join(error.split())
    found = _REFUSED_NODE.search(text)
    node = next((n for n in model.graph.node if found and n.name == found.group(2)), None)
    if node is None:
        return f"ONNX inference refuses the model: {text[:300]}"
    op, reason = found.group(1), found.group(3)
    shown = ", ".join(f"{name} {dtype_name(types[name].elem_type)}{list(types[name].dims or [])}"
                      if name in types else name for name in node.input if name)
    words = reason.lower()
    about_types = "type" in words and "shape" not in words and "dimension" not in words
    return (f"the input {'types are not allowed' if about_types else 'shapes disagree'} at node {node.name!r} "
            f"({op}): {shown}: {reason[:200]}")


def symbolic_value_infos(model: onnx.ModelProto, folded: onnx.ModelProto | None = None
                         ) -> dict[str, onnx.ValueInfoProto]:
    """Types with the original's symbolic dims (no dim fixed), for the inputs and outputs of emitted
    models: fold constant-only nodes (``folded``: :func:`fold` of ``model``, where the caller has it),
    ONNX inference, then onnxruntime's symbolic inference, which names derived dims
    (``past_sequence_length + sequence``). Dims no pass could name are left blank (inference's
    placeholder names ``unk__N`` would claim equalities nobody proved)."""
    current = onnx_infer(folded if folded is not None else fold(model)[0])
    found: dict[str, onnx.ValueInfoProto] = {}
    for candidate in (current, ort_symbolic_infer(current)):
        if candidate is None:
            continue
        g = candidate.graph
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                found[vi.name] = _blank_placeholders(vi)
    return found


def _blank_placeholders(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    for dim in out.type.tensor_type.shape.dim:
        if dim.HasField("dim_param") and dim.dim_param.startswith("unk__"):
            dim.ClearField("dim_param")
    return out


def _read_values(model: onnx.ModelProto) -> set[str]:
    """The values some node of ``model`` reads, and the graph outputs: the types costing needs."""
    return {name for node in model.graph.node for name in node.input if name} | {vi.name for vi in model.graph.output}


def _all_static(names: set[str], known: Mapping[str, ValueType]) -> bool:
    return all(name in known and known[name].static for name in names)


def _check_dtype(name: str, known: int, hint: Sequence[int]) -> None:
    """A UserError when ``--input-shape NAME=DIMS:DTYPE`` names an element type other than the one the
    model declares (or ONNX infers) for ``name``: the hint would be ignored without a word (issue 40)."""
    given = getattr(hint, "elem_type", 0)
    if given and known and given != known:
        raise UserError(f"--input-shape {name}: :{dtype_name(given)} contradicts the model, where {name!r} is "
                        f"{dtype_name(known)}: drop the :DTYPE (it is for tensors ONNX cannot type)")


def _with_overrides(model: onnx.ModelProto, dims: Mapping[str, int],
                    input_shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy with ``dims`` and ``input_shapes`` applied; internal hints typed by ONNX inference. Hints given
    with ``--force-shape`` may contradict the dims the model declares for other tensors: those (graph
    outputs, value_info) are dropped, to be inferred again from the forced ones."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    apply_dims(g, dims)
    inputs = {vi.name: vi for vi in g.input}
    internal = {name: shape for name, shape in input_shapes.items() if name not in inputs}
    for name, shape in input_shapes.items():
        if name in inputs:
            _check_dtype(name, inputs[name].type.tensor_type.elem_type, shape)
            apply_shape(inputs[name], shape)
    if forced(input_shapes):
        for vi in list(g.output) + list(g.value_info):
            vi.type.tensor_type.ClearField("shape")
    if internal:
        types = read_types(onnx_infer(out))
        for name, shape in internal.items():
            check_hint(name, types[name].dims if name in types else None, shape)
            _check_dtype(name, types[name].elem_type if name in types else 0, shape)
            elem_type = types.get(name, ValueType(0, None)).elem_type or getattr(shape, "elem_type", 0)
            if not elem_type:
                raise UserError(f"--input-shape {name}: ONNX type inference cannot tell the element type of "
                                f"{name!r} (its producer is opaque to it); give it: --input-shape "
                                f"{name}={'x'.join(map(str, shape)) or '1'}:float32 (or its real dtype)")
            target = next((vi for vi in g.value_info if vi.name == name), None) or g.value_info.add()
            target.name = name
            target.type.tensor_type.elem_type = elem_type
            apply_shape(target, shape)
    return out
