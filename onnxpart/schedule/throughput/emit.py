"""A throughput result as files (``--objective throughput``): the manifest, the certificate and the pieces
of a batched schedule (Sections 3.1–3.2 of the thesis, ../shared/papers/heterogeneous-scheduling-milp-split.txt).

A batched schedule splits each op's ``L`` inputs into slices over the devices (data parallelism) and
orders every slice (model parallelism). The manifest's ``ops[]`` lists every slice — name, device,
start, end, ``batch`` (its size), ``input`` (its first input) and ``inputs`` ``[lo, hi)`` — and
``transfers[]`` every tensor move between slices on two devices that share inputs (precedence per
input, 3.3; each timed by :meth:`~onnxpart.schedule.common.instance.Instance.delay_count`), so the batch makespan
``C`` can be recomputed; the certificate bounds ``C`` (minimized), and ``details`` gives the
throughput ``L/C`` and the proven ceiling ``L/LB``. ``gantt.png`` is drawn from the same events
(:func:`onnxpart.schedule.common.gantt.gantt_png`). ``pieces[]`` lists the pieces of
:mod:`onnxpart.schedule.throughput.pieces` — as latency's, plus ``slice`` ``[lo, hi)``, ``batch``, ``input``
and ``run`` (on rows or once per input, :mod:`onnxpart.schedule.throughput.verify`) — and ``batch_axis`` says
which axis the pieces slice; :func:`piece_models` makes each piece's ONNX model with the shared parts
emitter (:func:`onnxpart.parts.part_models`, one piece's ops against the rest).

``annotated.onnx`` (:func:`annotated_model`, through :func:`onnxpart.parts.annotate`) is the original
model with latency's ``DeviceConfigurationProto`` named ``schedule`` and, on every node, a
``NodeDeviceConfigurationProto`` whose ``ShardingSpecProto`` per output encodes the op's slices exactly
(:func:`sharding_spec`): the batch axis split into ``S`` equal contiguous shards, ``device[s]`` the device
whose slice holds shard ``s``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import onnx

from onnxpart.certificate import Certificate, instance_hash
from onnxpart.parts import annotate, part_io, part_models
from onnxpart.schedule.common.emit import (CONFIGURATION, certificate as shared_certificate, finite, instance_digest,
                                           manifest_head, piece_entry, piece_graph_name, transfer_entry)
from onnxpart.schedule.common.instance import Instance
from onnxpart.schedule.common.pieces import Piece
from onnxpart.schedule.throughput.model import Split, ranges
from onnxpart.schedule.throughput.simulator import BatchSchedule, slice_transfers
from onnxpart.schedule.throughput.verify import BatchAxis, batch_axis, verify_pieces
from onnxpart.units import format_seconds

OBJECTIVE = "throughput: batch makespan C (s), throughput = batch / C"


def certificate_hash(inst: Instance, model_sha256: str | None, batch: int, max_pieces: int | None) -> str:
    """Instance sha256: model file + the instance's costs and system + the objective and batch (+ the
    piece limit when one is set)."""
    limit = [] if max_pieces is None else [max_pieces]
    return instance_hash(model_sha256, instance_digest(inst), "throughput", batch, *limit)


def device_summary(inst: Instance, sched: BatchSchedule) -> list[dict[str, Any]]:
    """Per device: busy seconds, ops with a slice there, and (3.7)'s resident bytes with batching (an
    op's weights once, its activations per input: ``mem_i + act_mem_i·(x − 1)`` for ``x`` inputs)."""
    busy, memory = sched.busy(inst.k), np.zeros(inst.k)
    ops = np.zeros(inst.k, dtype=np.int64)
    for i, split in enumerate(sched.splits):
        for u, x in enumerate(split):
            if x > 0:
                ops[u] += 1
                memory[u] += inst.mem[i] + inst.act_mem[i] * (x - 1)
    return [{"name": name, "busy": float(busy[u]), "ops": int(ops[u]), "memory": float(memory[u]),
             "capacity": finite(inst.capacity[u])}
            for u, name in enumerate(inst.device_names)]


def manifest(solution, sched: BatchSchedule, parts: list[Piece], graph, model_path: str | None,
             model_sha256: str | None, files: dict[int, str], axis) -> dict[str, Any]:
    """The throughput manifest (module docstring) of the emitted (maybe merged) ``sched``: ``ops[]`` has
    one entry per slice, ``transfers[]`` one per :func:`~onnxpart.schedule.throughput.simulator.slice_transfers`
    entry; ``axis`` (:class:`~onnxpart.schedule.throughput.verify.BatchAxis`, None for graph-only input)
    tells how each piece runs."""
    inst = solution.instance
    ops = []
    for i, u in sorted(sched.start, key=lambda key: (sched.start[key], key)):
        lo, hi = ranges(sched.splits[i])[u]
        ops.append({"name": inst.op_names[i], "device": inst.device_names[u], "start": float(sched.start[(i, u)]),
                    "end": float(sched.end[(i, u)]), "batch": hi - lo, "input": lo, "inputs": [lo, hi]})
    transfers = [{**transfer_entry(inst, graph, t.src[0], t.dst[0], t.src[1], t.dst[1], t.start, t.end, t.bytes),
                  "inputs": list(t.inputs)} for t in slice_transfers(inst, sched)]
    return {**manifest_head(solution, graph, model_path, model_sha256, "throughput", "inputs/s"),
            "batch": sched.batch, "method": solution.method, "makespan": sched.makespan,
            "throughput": sched.throughput, "ops": ops, "transfers": transfers,
            "batch_axis": axis.to_dict() if axis is not None else None,
            "pieces": [_piece_entry(inst, sched, piece, graph, files, axis) for piece in parts],
            "devices": device_summary(inst, sched)}


def _piece_entry(inst: Instance, sched: BatchSchedule, piece: Piece, graph, files: dict[int, str], axis) -> dict:
    """A ``pieces[]`` entry: latency's fields, the slice ``[lo, hi)`` it computes, and how it runs."""
    reads, makes = part_io(graph, _alone(inst, piece), 2)[0]
    lo, hi = piece.inputs
    slices = [(i, piece.device) for i in piece.ops]
    return piece_entry(inst, graph, piece, files, (reads, makes),
                       (min(sched.start[key] for key in slices), max(sched.end[key] for key in slices)),
                       slice=[lo, hi], batch=hi - lo, input=lo,
                       run=axis.run(reads + makes) if axis is not None else None)


def _alone(inst: Instance, piece: Piece) -> np.ndarray:
    """The op → part assignment putting ``piece``'s ops in part 0 and every other op in part 1."""
    assignment = np.ones(inst.n, dtype=np.int64)
    assignment[list(piece.ops)] = 0
    return assignment


def piece_models(loaded_model, graph, parts: list[Piece], inst: Instance, declare=None) -> dict[int, onnx.ModelProto]:
    """``{piece index: ModelProto}``: each piece's ops extracted by :func:`onnxpart.parts.part_models`
    (its inputs and outputs those of :func:`_piece_entry`). An op split over devices is in several pieces."""
    return {piece.index: part_models(loaded_model, graph, _alone(inst, piece), 2,
                                     lambda _, piece=piece: piece_graph_name(graph, piece, inst), declare, only=(0,))[0]
            for piece in parts}


def certificate(solution, sched: BatchSchedule, model_sha256: str | None, options: dict[str, Any]) -> Certificate:
    """``problem: "schedule"``, the emitted batch makespan ``C`` as the upper bound, every proven bound of
    ``C``; ``details.solver_makespan`` is the solver's before ``--max-pieces`` merged pieces."""
    instance_sha256 = certificate_hash(solution.instance, model_sha256, sched.batch, options.get("max_pieces"))
    cert = shared_certificate(solution, instance_sha256, OBJECTIVE, sched.makespan,
                              {"batch": sched.batch, "throughput": sched.throughput}, options)
    lb = cert.best_lower_bound
    cert.details["throughput_ceiling"] = sched.batch / lb if lb else None  # proven: no schedule does better
    return cert


def summary(sched: BatchSchedule) -> dict[str, Any]:
    """The command's own result fields (``--json``)."""
    return {"makespan": sched.makespan, "throughput": sched.throughput, "batch": sched.batch}


def pieces_axis(loaded, freeze: bool) -> BatchAxis | None:
    """The axis the pieces slice (:func:`.verify.batch_axis`; exit 2 when the model has none), None for
    graph-only input (no pieces are written)."""
    return batch_axis(loaded, freeze) if loaded is not None else None


def piece_runner(axis: BatchAxis, sched: BatchSchedule):
    """How ``--verify`` runs the pieces: on the batch's inputs (:func:`.verify.verify_pieces`)."""
    return functools.partial(verify_pieces, axis=axis, batch=sched.batch)


def gantt_title(graph, sched: BatchSchedule) -> str:
    """``gantt.png``'s title."""
    return f"{graph.name}: batch of {sched.batch}, makespan {format_seconds(sched.makespan)}"


def shards(split: Split) -> tuple[list[int], int]:
    """``(device of each shard, inputs per shard g)`` of an op's ``split``: ``g`` is the gcd of every slice
    boundary, so each slice ``[lo, hi)`` is ``(hi − lo) / g`` whole shards, contiguous and in device order
    (:func:`~onnxpart.schedule.throughput.model.ranges`); a device appears once per shard it holds."""
    spans = [(u, lo, hi) for u, (lo, hi) in enumerate(ranges(split)) if hi > lo]
    g = math.gcd(*(bound for _, lo, hi in spans for bound in (lo, hi)))
    return [u for u, lo, hi in spans for _ in range((hi - lo) // g)], g


def sharding_spec(tensor: str, split: Split, axis: int | None, dim: str | None) -> onnx.ShardingSpecProto:
    """How ``tensor``, an output of an op split as ``split``, lies on the devices. ONNX's semantics
    (onnx-ml.proto, ``ShardingSpecProto``/``ShardedDimProto``/``SimpleShardedDimProto``; the sharding
    formalism, onnx/docs/proposals/ShardingFormalism.md): ``device`` lists the devices the tensor is
    sharded or replicated across; a ``ShardedDimProto`` on ``axis`` with one ``SimpleShardedDimProto``
    divides that dim's blocks (``dim_value`` or symbolic ``dim_param``) into ``num_shards`` equal shards,
    shard ``s`` on ``device[s]``; axes without one are replicated.

    * One slice (the op runs whole on device ``u``): ``device=[u]``, no sharded dim (as latency).
    * Split, batch axis known: ``device`` = :func:`shards`, ``num_shards`` = ``S = L / g``, the dim is
      ``dim_param=dim`` (rows mode: the symbolic batch dim, ``L × rows`` rows for the batch) or
      ``dim_value=L`` (per input: the ``L`` inputs' tensors laid along axis 0, one block each).
    * Split, no batch axis (``axis`` None: a weight generator's output, a tensor that folds the batch
      dim away, a scalar): ``device`` = the devices running a slice, in device order, no sharded dim —
      each makes its own copy for its inputs."""
    used = [u for u, x in enumerate(split) if x > 0]
    if len(used) == 1 or axis is None:
        return onnx.ShardingSpecProto(tensor_name=tensor, device=used)
    devices, g = shards(split)
    size = {"dim_param": dim} if dim is not None else {"dim_value": sum(split)}
    simple = onnx.SimpleShardedDimProto(num_shards=sum(split) // g, **size)
    return onnx.ShardingSpecProto(tensor_name=tensor, device=devices,
                                  sharded_dim=[onnx.ShardedDimProto(axis=axis, simple_sharding=[simple])])


def annotated_model(loaded, graph, inst: Instance, sched: BatchSchedule, axis) -> onnx.ModelProto:
    """The original model (``loaded``: :class:`~onnxpart.onnx_io.LoadedModel`) annotated by
    :func:`onnxpart.parts.annotate` (one part per op) with a :func:`sharding_spec` per node output.
    The batch axis of a tensor is the pieces' (``axis``: :class:`~onnxpart.schedule.throughput.verify.BatchAxis`):
    with a symbolic batch dim, the tensor's one axis named by it (none when no single axis is); per
    input, axis 0 (none for a scalar). A weight generator's output has none."""
    generated = {name for op in graph.ops for name in op.const_nodes}

    def tensor_axis(name: str) -> int | None:
        if axis.dim is not None:
            return axis.axes.get(name)
        known = loaded.types.get(name)
        return 0 if known is not None and known.dims else None

    def fields(i: int, node: onnx.NodeProto) -> dict[str, Any]:
        return {"sharding_spec": [sharding_spec(out, sched.splits[i], None if node.name in generated
                                                else tensor_axis(out), axis.dim) for out in node.output if out]}

    return annotate(loaded.model, graph, np.arange(inst.n), CONFIGURATION, list(inst.device_names), fields,
                    per_node=True)
