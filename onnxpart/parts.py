"""Splitting a model into runnable parts by an op → part assignment, and annotating it with ONNX's own
multi-device fields — what partition's stages, schedule's per-device pieces and tile's sharded plan share.

* :func:`part_io` — the tensors each part receives and sends (a part's inputs: tensors made by another
  part or graph inputs; its outputs: tensors another part reads, and the model outputs it makes; the last
  part also emits the model outputs no op makes: constants, graph inputs passed through).
* :func:`part_models` — one standalone ONNX model per non-empty part
  (:func:`onnxpart.onnx_extract.extract_subgraph`: weight generators pulled in, each before its first reader).
* :func:`annotate` — the original model with ``ModelProto.configuration`` (one ``DeviceConfigurationProto``)
  and, on every compute node and the weight generators it owns, a ``NodeDeviceConfigurationProto`` whose
  fields the caller chooses (``pipeline_stage`` for partition; the device, and a sharding spec, for
  schedule and tile). IR version ≥ 11, where these fields exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxpart.frozen_constants import frozen_constants
from onnxpart.onnx_extract import ModelIndex, extract_subgraph
from onnxpart.onnx_io import copy_proto
from onnxpart.shapes import ValueType


def part_io(graph, assignment: np.ndarray, count: int) -> list[tuple[list[str], list[str]]]:
    """(inputs, outputs) tensor names per part of an OpGraph, in a deterministic order."""
    io: list[tuple[list[str], list[str]]] = [([], []) for _ in range(count)]
    outputs = set(graph.outputs)
    for op in graph.ops:
        part = int(assignment[op.index])
        for name in op.inputs:
            tensor = graph.tensors[name]
            if (tensor.producer is None or assignment[tensor.producer] != part) and name not in io[part][0]:
                io[part][0].append(name)
        for name in op.outputs:
            tensor = graph.tensors.get(name)
            if tensor is None:
                continue
            elsewhere = any(assignment[c] != part for c in tensor.consumers)
            if (elsewhere or name in outputs) and name not in io[part][1]:
                io[part][1].append(name)
    made = {name for op in graph.ops for name in op.outputs}
    last = int(assignment.max(initial=0))
    for name in graph.outputs:
        if name in made or name in io[last][1]:
            continue
        if name in graph.inputs and name not in io[last][0]:
            io[last][0].append(name)
        io[last][1].append(name)
    _dead_results(graph, assignment, io)
    return io


def _dead_results(graph, assignment: np.ndarray, io: list[tuple[list[str], list[str]]]) -> None:
    """A part whose ops make only results nobody reads (dead code, which onnxruntime accepts in a model)
    would have no outputs, and onnxruntime refuses a graph without one: it gets those results as outputs.
    (A non-empty part always has one then: its last op's results are read by no later op of the part.)"""
    empty = {part for part, (_, outputs) in enumerate(io) if not outputs}
    for op in graph.ops:
        part = int(assignment[op.index])
        if part not in empty:
            continue
        for name in op.outputs:
            tensor = graph.tensors.get(name)
            if tensor is not None and not tensor.consumers and name not in io[part][1]:
                io[part][1].append(name)


def part_models(model: onnx.ModelProto, graph, assignment: np.ndarray, count: int,
                name: Callable[[int], str], declare=None, only: Sequence[int] | None = None,
                frozen: Mapping[str, ValueType] | None = None) -> dict[int, onnx.ModelProto]:
    """``{part: ModelProto}`` for the non-empty parts (those in ``only`` when given): :func:`iter_part_models`."""
    return dict(iter_part_models(model, graph, assignment, count, name, declare, only, frozen))


def iter_part_models(model: onnx.ModelProto, graph, assignment: np.ndarray, count: int,
                     name: Callable[[int], str], declare=None, only: Sequence[int] | None = None,
                     frozen: Mapping[str, ValueType] | None = None) -> Iterator[tuple[int, onnx.ModelProto]]:
    """``(part, ModelProto)`` for the non-empty parts (those in ``only`` when given), one at a time, so a
    writer holds one part's weights at once (64 stages of a model with 0.9 GB embedded held all of them);
    ``name(part)`` names each graph; ``declare(name)`` types their inputs and outputs (see
    :func:`onnxpart.onnx_extract.extract_subgraph`). ``frozen``: the concrete types of ``--freeze-dims``; a
    part input that is constant under them (a shape computed in an earlier part) is an initializer of the
    part (:func:`onnxpart.frozen_constants.frozen_constants`)."""
    io = part_io(graph, assignment, count)
    index = ModelIndex.of(model)  # one index for every part: parts x model would be 100 s for 1,000 pieces
    nodes: dict[int, list[str]] = {}
    for op in graph.ops:
        nodes.setdefault(int(assignment[op.index]), []).extend(op.onnx_nodes)
    for part in range(count) if only is None else only:
        if nodes.get(part):
            constants = None if frozen is None else frozen_constants(model, frozen, io[part][0])
            yield part, extract_subgraph(model, nodes[part], io[part][0], io[part][1], name=name(part),
                                         declare=declare, constants=constants, index=index)


def annotate(model: onnx.ModelProto, graph, assignment: np.ndarray, configuration: str,
             devices: Sequence[str], fields: Callable[..., dict[str, Any]], per_node: bool = False) -> onnx.ModelProto:
    """A copy of ``model`` with the device configuration ``configuration`` (``devices`` named) and, on
    every node of every op, ``NodeDeviceConfigurationProto(configuration_id=configuration,
    **fields(part))`` (``fields(part, node)`` with ``per_node``: a sharding spec names the node's tensors)."""
    out = copy_proto(model)
    part_of = {name: int(assignment[op.index]) for op in graph.ops for name in op.onnx_nodes + op.const_nodes}
    del out.configuration[:]
    out.configuration.append(onnx.DeviceConfigurationProto(name=configuration, num_devices=len(devices),
                                                           device=list(devices)))
    for node in out.graph.node:
        if node.name in part_of:
            del node.device_configurations[:]
            node.device_configurations.append(onnx.NodeDeviceConfigurationProto(
                configuration_id=configuration,
                **(fields(part_of[node.name], node) if per_node else fields(part_of[node.name]))))
    out.ir_version = max(out.ir_version, 11)
    return out
