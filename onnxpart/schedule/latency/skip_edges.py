"""The skip-edge relaxation: a proven lower bound from dropping the edges that join one cut op straight to
the next across a module — the residual connection around a transformer layer's attention block.

A module of MILP-SPLIT (:mod:`.split`) runs from a cut op ``c_k`` to the next, ``c_{k+1}``. In a
transformer layer the residual stream is such a cut, and the edge ``c_k → c_{k+1}`` (the residual
input of the Add that closes the block) is what keeps every op inside from being one: without it, the
attention's output projection and the ops after the attention join are cut ops too. Left whole, the
KV-cache decoder step's 45-op layer (after :mod:`.broadcast`'s deletion) is not proven by CP-SAT in
SPLIT's budgets — one (A100, A100) pair: bound 128.5 µs after 2 deterministic seconds, its optimum
150.4 µs proven only after 4 (20 s of one core); without its residual edge it falls into a 35-op
module and seven smaller ones, and SPLIT's bound over the 12 layers rose from 1.555 to 1.688 ms in the
same 15 s.

Relaxation. For any set ``E`` of edges, the instance ``G − E`` — the same ops, times and memory, the
other edges with their delays — has ``OPT(G − E) ≤ OPT(G)``. *Proof:* an optimal schedule of ``G``
keeps every op's device and start in ``G − E``. Each remaining edge's precedence with its transfer
delay (3.3) holds as it did; links are contention-free (Section 2.3), so dropping a transfer delays no
other; each device runs the same intervals, and its memory sum (3.7) is the same. So it is a schedule
of ``G − E`` with the same makespan, and any proven lower bound of ``G − E`` is one of ``G``. It gives up
at most the dropped transfers' delays (delaying, edge by edge, whatever starts at ``c_{k+1}`` or later by
that edge's delay turns a schedule of ``G − E`` into one of ``G``), and mostly nothing: inside a module
the path from ``c_k`` to ``c_{k+1}`` through its other ops is the longer one.

The choice of ``E`` is a heuristic (the proof holds for any ``E``): an edge ``c_k → c_{k+1}`` between
consecutive cut ops is dropped only where, without it, the module's ops hold a cut op of their own (so
nothing is given up for no smaller module); dropping repeats on the smaller modules until none is left.
"""

from __future__ import annotations

from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.modules import cut_ops, segments


def skip_edges(inst: Instance) -> list[int]:
    """The indices of the edges ``c_k → c_{k+1}`` between consecutive cut ops whose module, without that
    edge, has a cut op inside it (module docstring)."""
    cuts = cut_ops(inst)
    if len(cuts) < 2:
        return []
    edge_index = {(i, j): e for e, (i, j, _) in enumerate(inst.edges)}
    out = []
    for ops, entry, exit_ in segments(inst, cuts):
        e = edge_index.get((entry, exit_))
        if e is None or len(ops) < 3:  # only the entry and one op: nothing inside to cut at
            continue
        module, _ = inst.subinstance(ops + [exit_])  # the entry is its op 0, the exit its last
        spanning = [k for k, (i, j, _) in enumerate(module.edges) if (i, j) == (0, len(ops))]
        if len(cut_ops(module.without_edges(spanning))) > 2:  # the entry, the exit and at least one op between them
            out.append(e)
    return out


def relax(inst: Instance) -> Instance:
    """``G − E``: :func:`skip_edges` dropped, then those of the smaller modules that leaves, until none
    is left (``G`` itself where there are none)."""
    while drop := skip_edges(inst):
        inst = inst.without_edges(drop)
    return inst
