"""Solution -> files: ``remat.onnx``, ``sequence.json``, ``certificate.json`` and ``memory.png``.

``remat.onnx`` holds one node per compute event in sequence order, each weight generator
(``ConstantOfShape``-built weights, a run-time ``Transpose`` of a tied embedding…) just before its first
reader — where onnxruntime starts to hold its output — and the initializers as they are. A recomputation is a
clone of the original node named ``<node>__r<k>`` whose outputs are renamed ``<tensor>__r<k>``; every
later reader is rewired to the copy that is live at its event. Before anything is written the emitted
model is loaded back as an OpGraph and its own node order is simulated by
:func:`onnxpart.memory.memory_profile`: its peak must be within the budget (an ``AssertionError``
otherwise — that would be a bug).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import onnx

from onnxpart.graph import OpGraph, subgraphs
from onnxpart.onnx_io import copy_proto, place_generators
from onnxpart.memory import memory_profile
from onnxpart.remat.sequence import SequenceProfile
from onnxpart.runtime import KEEP_ORDER
from onnxpart.units import byte_unit

log = logging.getLogger(__name__)

SEQUENCE_SCHEMA = "onnxpart.remat.sequence/1"

#: How to run remat.onnx so onnxruntime keeps its order and does not merge the clones back (CSE).
SESSION_OPTIONS = {**KEEP_ORDER, "enable_mem_pattern": "False"}


def build_remat_model(model: onnx.ModelProto, graph: OpGraph, profile: SequenceProfile,
                      budget: int, declare: Callable[[str], onnx.ValueInfoProto] | None = None) -> onnx.ModelProto:
    """The rematerialized model: ``model`` is the model ``graph`` was built from; ``declare(name)``, if
    given, retypes the graph inputs and outputs (``--freeze-dims``)."""
    g = model.graph
    by_name = {node.name: node for node in g.node}
    compute = {name for op in graph.ops for name in op.onnx_nodes}
    taken = {o for node in g.node for o in node.output} | {vi.name for vi in g.input} \
        | {init.name for init in g.initializer} | set(by_name)
    types = {vi.name: vi for vi in list(g.value_info) + list(g.output) + list(g.input)}

    nodes = [copy_proto(node) for node in g.node if node.name not in compute]  # weight generators, dead constants
    value_info = [copy_proto(vi) for vi in g.value_info]
    live: dict[str, str] = {}
    for op_id, k in zip(profile.sequence, profile.copy_index):
        local: dict[str, str] = {}
        for name in graph.ops[op_id].onnx_nodes:
            nodes.append(_event_node(by_name[name], k, live, local, taken, types, value_info))
        live.update(local)

    nodes = place_generators(nodes, {node.name for node in g.node if node.name not in compute})
    retype = declare or (lambda name: types[name])
    weights = {init.name for init in g.initializer}
    inputs = [vi if vi.name in weights else retype(vi.name) for vi in g.input]
    out = onnx.helper.make_graph(nodes, g.name or "model", inputs, [retype(vi.name) for vi in g.output],
                                 initializer=list(g.initializer), value_info=value_info)
    remat = onnx.helper.make_model(out, opset_imports=list(model.opset_import),
                                   producer_name="onnxpart remat")
    remat.ir_version = model.ir_version
    for fn in model.functions:
        remat.functions.append(fn)
    onnx.helper.set_model_props(remat, {
        **{p.key: p.value for p in model.metadata_props},
        "onnxpart.remat.session_options": "; ".join(f"{k}={v}" for k, v in SESSION_OPTIONS.items()),
        "onnxpart.remat.note": "run with these onnxruntime session options: the default execution order "
                               "hoists recomputations and graph optimizations merge the clones back",
        "onnxpart.remat.budget_bytes": str(budget),
        "onnxpart.remat.predicted_peak_bytes": str(int(profile.peak)),
    })
    return remat


def _event_node(source: onnx.NodeProto, k: int, live: dict[str, str], local: dict[str, str], taken: set[str],
                types: dict[str, onnx.ValueInfoProto], value_info: list) -> onnx.NodeProto:
    """The copy of ``source`` for computation ``k`` (0: the first) of its op: it reads the live copy of each
    input (``local``: this computation's own outputs first, then ``live``), and a recomputation writes fresh
    ``__r{k}`` names (recorded in ``local``, their types appended to ``value_info``)."""
    node = copy_proto(source)
    for j, value in enumerate(node.input):
        if value:
            node.input[j] = local.get(value, live.get(value, value))
    for body in subgraphs(node):  # If/Loop/Scan bodies read outer tensors by name: the live copy too
        _read_live_copies(body, lambda value: local.get(value, live.get(value, value)))
    if k == 0:
        local.update({value: value for value in node.output if value})
        return node
    node.name = _fresh(f"{source.name}__r{k}", taken)
    for j, value in enumerate(node.output):
        if value:
            renamed = _fresh(f"{value}__r{k}", taken)
            local[value] = renamed
            node.output[j] = renamed
            if value in types:
                vi = copy_proto(types[value])
                vi.name = renamed
                value_info.append(vi)
    return node


def _read_live_copies(body: onnx.GraphProto, live_name: Callable[[str], str]) -> None:
    """In place: every read of an outer-scope tensor in ``body`` (and in the bodies nested in it) goes to
    ``live_name`` of it. Names the body defines itself — its inputs, initializers and node outputs —
    shadow the outer ones and are left alone."""
    own = {vi.name for vi in body.input} | {init.name for init in body.initializer} \
        | {value for node in body.node for value in node.output}

    def outer(value: str) -> str:
        return value if not value or value in own else live_name(value)

    for node in body.node:
        for j, value in enumerate(node.input):
            node.input[j] = outer(value)
        for nested in subgraphs(node):
            _read_live_copies(nested, outer)
    for vi in body.output:  # a body may return an outer tensor as it is
        vi.name = outer(vi.name)


def check_emitted(remat: onnx.ModelProto, budget: int, include_params: bool, hints=None, dims=None) -> float:
    """Simulate the emitted file's own node order (shapes resolved at the planned ``dims`` and ``hints``);
    return its peak, asserting it is within the budget."""
    from onnxpart.graph import from_onnx
    from onnxpart.onnx_io import prepare

    peak = memory_profile(from_onnx(prepare(remat, hints or {}, dims or {})), include_params=include_params).peak
    if peak > budget:
        raise AssertionError(f"emitted remat.onnx peaks at {peak:.0f} B in its own node order, over the "
                             f"budget {budget} B")
    return peak


def sequence_payload(graph: OpGraph, model_path: str | None, profile: SequenceProfile, budget: int,
                     baseline: SequenceProfile, method: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``sequence.json``: the model planned on (its path and the sha256 of the graph, after
    ``--ort-optimize`` the optimized one's), the events in order with the memory at each, and the totals."""
    return {
        "schema": SEQUENCE_SCHEMA,
        "model": {"path": model_path, "sha256": graph.model_sha256},
        "graph": graph.name,
        "method": method,
        "budget_bytes": budget,
        "baseline_peak_bytes": baseline.peak,
        "peak_bytes": profile.peak,
        "peak_event": profile.peak_event,
        "base_duration": profile.base_duration,
        "duration": profile.duration,
        "tdi": profile.tdi,
        "recomputations": profile.recomputations,
        "events": [
            {"event": i, "op": graph.ops[v].name, "recompute": k, "duration": graph.ops[v].work,
             "memory_bytes": m}
            for i, (v, k, m) in enumerate(zip(profile.sequence, profile.copy_index, profile.memory))
        ],
        **(extra or {}),
    }


def plot_memory(path, baseline: SequenceProfile, profile: SequenceProfile, budget: int, title: str) -> None:
    """``memory.png``: memory at each event before (input order) and after, and the budget line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit = byte_unit(max(baseline.peak, budget))
    fig, ax = plt.subplots(figsize=(9, 4), dpi=110)
    ax.step(range(len(baseline.memory)), [m / scale for m in baseline.memory], where="mid", lw=1.2,
            color="0.55", label=f"before: peak {baseline.peak / scale:.3g} {unit}")
    ax.step(range(len(profile.memory)), [m / scale for m in profile.memory], where="mid", lw=1.4,
            color="tab:blue", label=f"after: peak {profile.peak / scale:.3g} {unit}, "
                                    f"{profile.recomputations} recomputed, TDI {100 * profile.tdi:+.2f}%")
    ax.axhline(budget / scale, color="tab:red", ls="--", lw=1, label=f"budget {budget / scale:.3g} {unit}")
    ax.set_xlabel("compute event")
    ax.set_ylabel(f"activation memory ({unit})")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.margins(x=0.01)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def _fresh(name: str, taken: set[str]) -> str:
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate
