"""Layouts, algorithms and resharding on an n-D device mesh, composed from the 1-D catalog
(:mod:`onnxpart.tile.onnx.catalog`) one mesh axis at a time — the composition of Alpa ("Alpa: Automating
Inter- and Intra-Operator Parallelism", Zheng et al., OSDI 2022, Section 4.1) and of DTensor's
placements.

Mesh: shape (p_0, ..., p_{k-1}), device (i_0, ..., i_{k-1}) has id Σ_j i_j·Π_{l>j} p_l (row-major); every
axis has its own ring (latency a_j, bandwidth B_j).

Layout on the mesh: one 1-D layout per mesh axis (``R``, ``P`` or ``S(d)``), written by concatenating
the components in axis order: ``S(0)R`` (dim 0 split over axis 0, replicated over axis 1), ``RS(1)``,
``S(0)S(0)`` (dim 0 split over both axes, axis 0 major: p_0·p_1 pieces), ``PS(1)``. On a 1-D mesh a
layout is its single catalog :class:`~onnxpart.tile.onnx.catalog.Layout` (``R``, ``S(0)``, ``P``), so the
1-D strings and objects are those of the catalog; :func:`parts` and :func:`compose` are the one
bridge, used by every caller. A dim sharded by several axes must divide by the product of their sizes.

Algorithms: an op's algorithm on the mesh is a tuple of catalog algorithms, axis j's taken from the
catalog for the shapes left after axes 0..j-1 shard them (:func:`compose_algorithms`); its compute
divisor is the product of theirs. Any op the 1-D catalog knows composes with no per-op n-D code.

Resharding src -> dst is priced and planned by the index sets it moves, in :mod:`onnxpart.tile.onnx.resharding`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from onnxpart.errors import UserError
from onnxpart.tile.onnx.catalog import P, R, Algorithm, Layout, Mesh, S
from onnxpart.units import DEVICES, MESH_AXES, Range, parse_number


class MeshLayout(tuple):
    """A layout on a mesh of ≥ 2 axes: one catalog Layout per axis (module docstring). Its hash is kept:
    the searches look layouts up in dicts millions of times."""

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            self._hash = tuple.__hash__(self)
            return self._hash

    def __str__(self) -> str:
        return "".join(str(a) for a in self)

    __repr__ = __str__


def parts(layout) -> tuple[Layout, ...]:
    """The per-axis components of a mesh layout (a catalog Layout is a 1-axis one)."""
    return tuple(layout) if isinstance(layout, tuple) else (layout,)


def compose(components: Sequence[Layout]):
    """The mesh layout of per-axis components: the catalog Layout itself on a 1-D mesh."""
    return components[0] if len(components) == 1 else MeshLayout(components)


@dataclass(frozen=True)
class DeviceMesh:
    """An n-D mesh: ``shape`` (p_j), ``names``, and per axis the ring's ``latencies`` (s per step) and
    ``bandwidths`` (bytes/s per link)."""

    shape: tuple[int, ...]
    names: tuple[str, ...]
    latencies: tuple[float, ...]
    bandwidths: tuple[float, ...]

    @property
    def devices(self) -> int:
        n = 1
        for p in self.shape:
            n *= p
        return n

    @cached_property
    def axes(self) -> tuple[Mesh, ...]:
        """Each axis as the catalog's 1-D ring."""
        return tuple(Mesh(p, a, b) for p, a, b in zip(self.shape, self.latencies, self.bandwidths))

    def factor(self, layout) -> int:
        """How many pieces a tensor in ``layout`` is cut into (Π p_j over its S components)."""
        f = 1
        for p, a in zip(self.shape, parts(layout)):
            f *= p if a.kind == "S" else 1
        return f

    def per_device(self, nbytes: int, layout) -> int:
        """Bytes one device holds of an ``nbytes`` tensor in ``layout`` (a shard rounded up)."""
        return -(-nbytes // self.factor(layout))


def make_mesh(shape: Sequence[int], names: Sequence[str] | None = None, latencies: Sequence[float] = (5e-6,),
              bandwidths: Sequence[float] = (100e9,)) -> DeviceMesh:
    """A DeviceMesh; one latency or bandwidth applies to every axis. UserError on a bad shape or count."""
    shape = check_mesh(tuple(int(p) for p in shape))
    names = tuple(names) if names else ("x", "y", "z", "w")[:len(shape)] if len(shape) <= 4 else \
        tuple(f"a{j}" for j in range(len(shape)))
    if len(names) != len(shape) or len(set(names)) != len(names):
        raise UserError(f"--mesh-axes {','.join(names)}: give {len(shape)} distinct names, one per mesh axis")
    return DeviceMesh(shape, names, _per_axis(latencies, shape, "--mesh-latency"),
                      _per_axis(bandwidths, shape, "--mesh-bandwidth"))


def _per_axis(values: Sequence[float], shape: tuple[int, ...], option: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in values)
    if len(values) == 1:
        return values * len(shape)
    if len(values) != len(shape):
        raise UserError(f"{option}: give one value or {len(shape)} (one per mesh axis), got {len(values)}")
    return values


_MESH = re.compile(r"^\s*\d+(\s*[x×,]\s*\d+)*\s*$")


def parse_mesh(text: str) -> tuple[int, ...]:
    """``8``, ``2x4`` (or ``2,4``) -> the mesh shape (:func:`check_mesh`); UserError otherwise."""
    if not _MESH.match(text):
        raise UserError(f"--mesh {text!r}: use the devices per axis, e.g. 8 or 2x4")
    parts = re.split(r"[x×,]", text.replace(" ", ""))
    if len(parts) > MESH_AXES:
        raise UserError(f"--mesh {text!r}: at most {MESH_AXES} axes (the limit), got {len(parts)}")
    return check_mesh(tuple(parse_number(p, "--mesh", AXIS) for p in parts))


#: Devices along one mesh axis.
AXIS = Range(1, DEVICES.high, integer=True, noun="a device count")


def check_mesh(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` if it is a mesh onnxpart plans for: 1 to :data:`~onnxpart.units.MESH_AXES` axes of at
    least 1 device, at most :data:`~onnxpart.units.DEVICES` devices in all (resharding tries every order
    of the changed axes, so more axes would explode); UserError otherwise."""
    text = "x".join(map(str, shape)) or "(empty)"
    if not shape or len(shape) > MESH_AXES:
        raise UserError(f"--mesh {text}: give 1 to {MESH_AXES} axes (the limit)")
    if any(p < 1 for p in shape):
        raise UserError(f"--mesh {text}: every axis needs at least 1 device")
    if math.prod(shape) > DEVICES.high:
        raise UserError(f"--mesh {text}: {math.prod(shape)} devices, above the limit of {DEVICES.high}")
    return shape


_TOKEN = re.compile(r"\s*(R|P|S\s*[\(\[]\s*(-?\d+)\s*[\)\]])", re.IGNORECASE)


def parse_mesh_layout(text: str, axes: int):
    """``R``, ``S(0)`` (1-D), ``S(0)R``, ``RS[1]``, ``S(0)S(0)`` (2-D, one component per mesh axis) -> a
    mesh layout; UserError when it is malformed or has the wrong number of components."""
    comps, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if not m:
            raise UserError(f"unknown layout {text!r}: use R, P or S(d) per mesh axis (e.g. S(0) on a 1-D mesh, "
                            "S(0)R on a 2-D one)")
        word = m.group(1).upper()
        comps.append(S(int(m.group(2))) if word.startswith("S") else (R if word == "R" else P))
        pos = m.end()
    if len(comps) != axes:
        raise UserError(f"layout {text!r} has {len(comps)} component(s) for a {axes}-axis mesh: give one of "
                        f"R, P, S(d) per mesh axis (e.g. {'S(0)' + 'R' * (axes - 1)})")
    return compose(comps)


def divisibility(shape: Sequence[int], devices: int) -> tuple[int, ...]:
    """``shape`` as far as a mesh of ``devices`` can tell: each dim's gcd with the device count (0 for an empty
    dim). A product q of mesh axis sizes divides a dim s > 0 (so s ≥ q) exactly when it divides
    gcd(s, devices): the same layouts divide both shapes (:func:`local_shape`)."""
    return tuple(math.gcd(int(s), devices) if s > 0 else 0 for s in shape)


def local_shape(shape: Sequence[int], components: Sequence[Layout], sizes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape one device sees after ``components`` shard ``shape`` on axes of ``sizes``; None when a
    sharded dim does not divide (or is out of range)."""
    out = list(shape)
    for a, p in zip(components, sizes):
        if a.kind != "S":
            continue
        if not 0 <= a.dim < len(out) or out[a.dim] % p or out[a.dim] < p:
            return None
        out[a.dim] //= p
    return tuple(out)


def compose_algorithms(algorithms: Callable[[list, tuple, int], list[Algorithm] | None],
                       in_shapes: Sequence[Sequence[int]], out_shapes: Sequence[Sequence[int]],
                       sizes: Sequence[int]) -> list[tuple[str, tuple, object, int]] | None:
    """Every tuple of per-axis catalog algorithms valid on the mesh (module docstring), as
    (name, input layouts, output layout, divisor); ``algorithms(in_shapes, out_shape, p)`` is the 1-D
    catalog of the op (``out_shape``: its first output's). Each output takes the output layout, which
    must divide every output's shape. None when the op is not in the catalog."""
    chains = [((), tuple(map(tuple, in_shapes)), tuple(map(tuple, out_shapes)))]
    for p in sizes:
        grown = []
        for chain, ins, outs in chains:
            algs = algorithms([list(s) for s in ins], outs[0], p)
            if algs is None:
                return None
            for a in algs:
                new_ins = [local_shape(s, (lay,), (p,)) for s, lay in zip(ins, a.inputs)]
                new_outs = [local_shape(s, (a.output,), (p,)) for s in outs]
                if all(s is not None for s in new_ins + new_outs):
                    grown.append((chain + (a,), tuple(new_ins), tuple(new_outs)))
        chains = grown
    out = []
    for chain, _, _ in chains:
        divisor = 1
        for a in chain:
            divisor *= a.divisor
        ins = tuple(compose([a.inputs[j] for a in chain]) for j in range(len(in_shapes)))
        out.append(("·".join(a.name for a in chain), ins, compose([a.output for a in chain]), divisor))
    return out
