"""Virtual devices exchanging data: a tensor held as one numpy array per device of a mesh, laid out by the
definition of its layout, converted by the steps :func:`onnxpart.tile.onnx.resharding.plan` priced, each run as
messages between the devices of every group along its mesh axis — what ``--verify`` runs
(:mod:`onnxpart.tile.onnx.verify`), and what the tests hold against the index sets of every layout.

Devices are numbered row-major over the mesh shape (device (i, j) of a 2x4 mesh is 4i + j). A device's
*block* of a tensor in a layout is its index set (:mod:`onnxpart.tile.onnx.resharding`): along each dim d,
block number Σ over the mesh axes with component ``S(d)``, in axis order, of coordinate × (the product
of the later such axes' sizes). With ``P`` components, the devices of a group along those axes hold
addends whose sum is the block.

Collectives, inside one group of ``p`` devices (in group order), each device receiving pieces from the
others; the bytes it receives are counted, and equal :func:`onnxpart.tile.onnx.catalog.collective_volume`:

* all-gather along d: device k receives every other device's array, concatenates them in group order;
* all-to-all d -> e: device m cuts its array into p pieces along e and sends piece k to device k, which
  concatenates what it gets along d;
* reduce-scatter along e: device m cuts its array into p pieces along e and sends piece k to device k,
  which sums them in group order;
* all-reduce: reduce-scatter over the flattened array's p chunks, then all-gather of the summed chunks
  (the ring algorithm's traffic).

Local steps move nothing: ``R -> S(e)`` device k keeps its k-th slice; ``R -> P`` device 0 keeps the
value, the others hold zeros; ``S(d) -> P`` device k holds its array embedded at its place in zeros of
the group's whole block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from onnxpart.tile.onnx.catalog import P, R, Layout
from onnxpart.tile.onnx.mesh import parts
from onnxpart.tile.onnx.resharding import Step

Group = list[np.ndarray]


# ---------------------------------------------------------------------------------------- layouts
def block_index(layout, coords: Sequence[int], sizes: Sequence[int], shape: Sequence[int]) -> tuple[slice, ...]:
    """The index set (one slice per tensor dim) of the device at mesh ``coords`` (module docstring)."""
    comps = parts(layout)
    index = []
    for d, size in enumerate(shape):
        number, pieces = 0, 1
        for c, p, a in zip(coords, sizes, comps):
            if a.kind == "S" and a.dim == d:
                number, pieces = number * p + int(c), pieces * p
        step = size // pieces
        index.append(slice(number * step, (number + 1) * step))
    return tuple(index)


def lay_out(whole: np.ndarray, layout, sizes: Sequence[int]) -> list[np.ndarray]:
    """Each device's own piece of ``whole`` in ``layout`` (``P`` components: the device at coordinate 0
    along them holds the block, the others zeros)."""
    comps = parts(layout)
    out = []
    for coords in np.ndindex(*sizes):
        piece = whole[block_index(layout, coords, sizes, whole.shape)]
        keeps = all(c == 0 for c, a in zip(coords, comps) if a == P)
        out.append(np.array(piece) if keeps else np.zeros_like(piece))
    return out


def assemble(pieces: Sequence[np.ndarray], layout, sizes: Sequence[int], shape: Sequence[int]) -> list[np.ndarray]:
    """The whole tensor the devices' pieces stand for, once per replica (per coordinate along the mesh axes
    with component ``R``): each block placed at its index set, the addends of a ``P`` group summed. The
    verifier's own view, with no collective: every replica is held to the reference."""
    comps = parts(layout)
    wholes: dict[tuple, np.ndarray] = {}
    for device, coords in enumerate(np.ndindex(*sizes)):
        replica = tuple(c for c, a in zip(coords, comps) if a == R)
        whole = wholes.setdefault(replica, np.zeros(tuple(shape), dtype=pieces[device].dtype))
        index = block_index(layout, coords, sizes, shape)
        if whole[index].shape != pieces[device].shape:
            raise ValueError(f"device {device} holds a piece of shape {list(pieces[device].shape)}, its block in "
                             f"{layout} is {list(whole[index].shape)}")
        whole[index] += pieces[device]
    return list(wholes.values())


# ------------------------------------------------------------------------------------- collectives
def all_gather(group: Group, dim: int) -> tuple[Group, list[int]]:
    """S(dim) -> R (module docstring)."""
    whole = np.concatenate(group, axis=dim)
    return [whole.copy() for _ in group], [whole.nbytes - x.nbytes for x in group]


def all_to_all(group: Group, src: int, dst: int) -> tuple[Group, list[int]]:
    """S(src) -> S(dst)."""
    p = len(group)
    sent = [np.split(x, p, axis=dst) for x in group]
    out = [np.concatenate([sent[m][k] for m in range(p)], axis=src) for k in range(p)]
    return out, [sum(sent[m][k].nbytes for m in range(p) if m != k) for k in range(p)]


def reduce_scatter(group: Group, dim: int) -> tuple[Group, list[int]]:
    """P -> S(dim)."""
    p = len(group)
    sent = [np.split(x, p, axis=dim) for x in group]
    out = [_sum([sent[m][k] for m in range(p)]) for k in range(p)]
    return out, [sum(sent[m][k].nbytes for m in range(p) if m != k) for k in range(p)]


def all_reduce(group: Group) -> tuple[Group, list[int]]:
    """P -> R: reduce-scatter of the flattened chunks, then all-gather of the sums."""
    p, shape = len(group), group[0].shape
    chunks = [np.array_split(x.reshape(-1), p) for x in group]
    summed = [_sum([chunks[m][k] for m in range(p)]) for k in range(p)]
    whole = np.concatenate(summed).reshape(shape)
    received = [sum(chunks[m][k].nbytes for m in range(p) if m != k)
                + sum(summed[m].nbytes for m in range(p) if m != k) for k in range(p)]
    return [whole.copy() for _ in group], received


def _sum(arrays: Sequence[np.ndarray]) -> np.ndarray:
    total = np.array(arrays[0])
    for x in arrays[1:]:
        total = total + x
    return total


def _local(group: Group, before: Layout, after: Layout) -> Group:
    """The steps that move nothing (module docstring)."""
    p = len(group)
    if before == R and after.kind == "S":
        return [np.split(x, p, axis=after.dim)[k] for k, x in enumerate(group)]
    if before == R and after == P:
        return [group[0]] + [np.zeros_like(x) for x in group[1:]]
    if before.kind == "S" and after == P:
        out = []
        for k, x in enumerate(group):
            shape = list(x.shape)
            shape[before.dim] *= p
            full = np.zeros(shape, dtype=x.dtype)
            index = [slice(None)] * x.ndim
            index[before.dim] = slice(k * x.shape[before.dim], (k + 1) * x.shape[before.dim])
            full[tuple(index)] = x
            out.append(full)
        return out
    raise ValueError(f"no local step {before} -> {after}")


def collective(step: Step) -> Callable[[Group], tuple[Group, list[int]]]:
    """The group function that runs ``step`` (module docstring)."""
    before, after = step.before, step.after
    if step.collective is None:
        return lambda group: (_local(group, before, after), [0] * len(group))
    if step.collective == "all-gather":
        return lambda group: all_gather(group, before.dim)
    if step.collective == "all-to-all":
        return lambda group: all_to_all(group, before.dim, after.dim)
    if step.collective == "reduce-scatter":
        return lambda group: reduce_scatter(group, after.dim)
    return all_reduce


def run_step(pieces: Sequence[np.ndarray], step: Step, sizes: Sequence[int]) -> tuple[list[np.ndarray], list[int]]:
    """``step`` in every group of devices along its mesh axis: (the new pieces, bytes each device received)."""
    ids = np.moveaxis(np.arange(len(pieces)).reshape(tuple(sizes)), step.axis, -1).reshape(-1, sizes[step.axis])
    out, received = list(pieces), [0] * len(pieces)
    run = collective(step)
    for line in ids:
        values, got = run([pieces[i] for i in line])
        for i, value, nbytes in zip(line, values, got):
            out[i], received[i] = value, nbytes
    return out, received
