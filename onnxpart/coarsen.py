"""Coarsening: merge ops that no strategy would ever separate, to shrink n.

Rule: an op ``b`` whose op type is elementwise (activations, casts, per-channel affine ops such as
BatchNormalization) and whose only activation input is a tensor ``t`` that has ``b`` as its *only*
consumer (and is not a graph output) is merged into the producer of ``t``. Chains fold into their head:
``Conv → BatchNormalization → Relu`` becomes one op. Splitting such a chain can only add traffic (``t`` would
cross a boundary) and never saves memory (``t`` dies at ``b`` anyway), so no strategy loses an optimum
that respects those rules.

The merged op keeps the ONNX node names of all its parts (``Op.nodes``) so results still map back to the
file. Tensors that became internal are charged as ``Op.internal_bytes``: the largest sum of internal
tensors any one member reads and writes (at that member's step both are live), on top of the merged op's
external inputs and outputs — an upper estimate of the chain's working memory.
"""

from __future__ import annotations

import dataclasses

from onnxpart.graph import Op, OpGraph
from onnxpart.op_types import ELEMENTWISE_FLOPS

#: op types that are elementwise in their activation input (parameters may broadcast).
FUSIBLE = frozenset(ELEMENTWISE_FLOPS)


def coarsen(graph: OpGraph) -> OpGraph:
    """Return a new OpGraph with single-consumer elementwise chains merged into their producers."""
    outputs = set(graph.outputs)
    groups = _chains(graph, outputs)
    heads = sorted(groups)  # a group's head precedes its members, so this order is topological
    new_index = {member.index: position for position, h in enumerate(heads) for member in groups[h]}
    internal = {name for name, t in graph.tensors.items()
                if t.producer is not None and t.consumers
                and all(new_index[c] == new_index[t.producer] for c in t.consumers) and name not in outputs}
    ops = [_merged(position, groups[h], internal, graph) for position, h in enumerate(heads)]
    tensors = {
        name: dataclasses.replace(t, producer=None if t.producer is None else new_index[t.producer],
                                  consumers=tuple(sorted({new_index[c] for c in t.consumers})))
        for name, t in graph.tensors.items() if name not in internal
    }
    params = {
        name: dataclasses.replace(p, owner=new_index[p.owner],
                                  consumers=tuple(sorted({new_index[c] for c in p.consumers})))
        for name, p in graph.params.items()
    }
    return graph.replace(ops=ops, tensors=tensors, params=params)


def _chains(graph: OpGraph, outputs: set[str]) -> dict[int, list[Op]]:
    """The ops grouped by the op each is merged into (the module's rule), keyed by that head's index."""
    head = list(range(len(graph.ops)))  # op index -> index of the op it is merged into

    def root(i: int) -> int:
        while head[i] != i:
            i = head[i]
        return i

    for op in graph.ops:
        if op.op_type not in FUSIBLE or op.opaque or len(op.inputs) != 1 or len(op.outputs) != 1:
            continue
        tensor = graph.tensors[op.inputs[0]]
        if tensor.producer is None or len(tensor.consumers) != 1 or tensor.name in outputs:
            continue
        head[op.index] = root(tensor.producer)
    groups: dict[int, list[Op]] = {}
    for op in graph.ops:
        groups.setdefault(root(op.index), []).append(op)
    return groups


def _merged(position: int, members: list[Op], internal: set[str], graph: OpGraph) -> Op:
    """One op standing for ``members`` (a chain, head first) at index ``position``."""
    produced = {o for m in members for o in m.outputs}
    first = members[0]
    return Op(
        index=position,
        name=first.name,
        op_type="+".join(m.op_type for m in members) if len(members) > 1 else first.op_type,
        nodes=tuple(node for m in members for node in m.nodes),
        inputs=tuple(dict.fromkeys(i for m in members for i in m.inputs if i not in produced)),
        outputs=tuple(o for m in members for o in m.outputs if o not in internal),
        params=tuple(dict.fromkeys(p for m in members for p in m.params)),
        param_bytes=sum(m.param_bytes for m in members),
        const_nodes=tuple(c for m in members for c in m.const_nodes),
        internal_bytes=max(m.internal_bytes + sum(graph.tensors[t].bytes for t in m.inputs + m.outputs
                                                  if t in internal) for m in members),
        opaque=any(m.opaque for m in members),
        work=sum(m.work for m in members),
        flops=sum(m.flops for m in members),
        mem_bytes=sum(m.mem_bytes for m in members),
    )
