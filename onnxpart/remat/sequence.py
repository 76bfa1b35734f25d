"""The recompute-aware sequence simulator: memory at every compute event, peak, duration and total duration
increase (TDI) of a rematerialization sequence — the ground truth every solver's answer is checked with.

A *sequence* is a list of op ids (input nodes are implicit: they come first); an op may appear several
times. Rules (the retention-interval model of the Moccasin paper, Eq. 4, with the tightest retention a
sequence allows):

* each computation of an op creates a new *copy* of each of its output tensors; a reader always reads
  the most recent copy computed before it (the copy that is *live*);
* a copy occupies its bytes from its compute event up to and including the event of its last reader
  (just its own event if nobody reads it); the last copy of a graph output stays to the end;
* a graph input is resident from the start up to and including its last reader;
* memory at an event = the bytes of every resident copy + the op's internal bytes + ``constant_bytes``.

For a sequence without recomputation this is exactly :func:`onnxpart.memory.memory_profile`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onnxpart.remat.model import Instance


class InvalidSequence(ValueError):
    """A sequence that reads a tensor before any copy exists, misses an op, or recomputes an op that may
    not be recomputed."""


@dataclass(frozen=True)
class SequenceProfile:
    sequence: tuple[int, ...]  # op ids, in execution order
    copy_index: tuple[int, ...]  # 0 for the first computation of an op, 1 for the first recomputation, ...
    memory: tuple[float, ...]  # bytes at each compute event
    peak: float
    peak_event: int
    duration: float
    base_duration: float

    @property
    def tdi(self) -> float:
        """Total duration increase over computing every op once (a fraction: 0.023 = +2.3%)."""
        return (self.duration - self.base_duration) / self.base_duration if self.base_duration > 0 else 0.0

    @property
    def recomputations(self) -> int:
        return sum(1 for c in self.copy_index if c > 0)


def simulate(instance: Instance, sequence: Sequence[int]) -> SequenceProfile:
    """Memory at each event of ``sequence`` (see the module docstring for the rules)."""
    sequence = tuple(int(v) for v in sequence)
    inputs = instance.input_nodes
    events = inputs + sequence  # input nodes occupy events 0..k-1 (not reported)
    k = len(inputs)
    n_nodes, n_ops, reads, writes, sizes = (instance.n_nodes, instance.n_ops, instance.node_inputs,
                                            instance.node_outputs, instance.value_sizes)  # the loop's names
    counts = [0] * n_nodes
    live: dict[int, int] = {}  # value id -> copy id
    copy_start: list[int] = []
    copy_end: list[int] = []
    copy_size: list[int] = []
    copy_index = []
    for event, v in enumerate(events):
        if not 0 <= v < n_nodes or (event >= k and v >= n_ops):
            raise InvalidSequence(f"event {event - k}: {v} is not an op id")
        if counts[v] and not instance.recomputable(v):
            raise InvalidSequence(f"{instance.node_names[v]!r} is computed twice, but it produces a graph "
                                  "output (or is a graph input) and may be computed only once")
        for x in reads[v]:
            copy = live.get(x)
            if copy is None:
                raise InvalidSequence(f"event {event - k}: {instance.node_names[v]!r} reads "
                                      f"{instance.value_names[x]!r} before it is computed")
            copy_end[copy] = event
        if event >= k:
            copy_index.append(counts[v])
        counts[v] += 1
        for x in writes[v]:
            live[x] = len(copy_start)
            copy_start.append(event)
            copy_end.append(event)
            copy_size.append(sizes[x])
    missing = [instance.node_names[v] for v in range(instance.n_ops) if not counts[v]]
    if missing:
        raise InvalidSequence(f"{len(missing)} ops never computed, e.g. {missing[0]!r}")
    last = len(events) - 1
    for x, copy in live.items():
        if instance.value_to_end[x]:
            copy_end[copy] = last
    delta = np.zeros(len(events) + 1)
    np.add.at(delta, np.asarray(copy_start, dtype=np.int64), np.asarray(copy_size, dtype=float))
    np.add.at(delta, np.asarray(copy_end, dtype=np.int64) + 1, -np.asarray(copy_size, dtype=float))
    memory = np.cumsum(delta[:-1])[k:]
    memory = memory + np.array([instance.internal[v] for v in sequence], dtype=float) + instance.constant_bytes
    peak_event = int(np.argmax(memory)) if len(memory) else 0
    duration = float(sum(instance.durations[v] for v in sequence))
    return SequenceProfile(sequence, tuple(copy_index), tuple(float(m) for m in memory),
                           float(memory[peak_event]) if len(memory) else 0.0, peak_event, duration,
                           instance.base_duration)


def baseline(instance: Instance) -> SequenceProfile:
    """The input order without recomputation: the peak that ``--budget P%`` is relative to."""
    return simulate(instance, instance.op_order())
