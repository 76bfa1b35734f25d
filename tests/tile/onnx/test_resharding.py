"""Resharding priced by index sets (onnxpart.tile.onnx.resharding) and run as data movement (onnxpart.tile.onnx.exchange):
for every pair of layouts a tensor may take on 1-D, 2-D and 3-D meshes, the priced steps, run on per-device
numpy arrays, leave every device holding exactly its index set in the target layout, and every device
receive together exactly the bytes the step was priced for. The two transitions issue 28 found mispriced are
checked against the old single-collective pricing."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxpart.tile.onnx.catalog import P, R, S, collective_time, reshard
from onnxpart.tile.onnx.exchange import block_index, lay_out, run_step
from onnxpart.tile.onnx.mesh import MeshLayout, make_mesh, parts
from onnxpart.tile.onnx.build import candidate_layouts
from onnxpart.tile.onnx.resharding import Step, plan, price_tables, reshard_time


def addends(whole: np.ndarray, layout, sizes, seed: int) -> list[np.ndarray]:
    """Each device's piece of ``whole`` in ``layout``, a ``P`` group's addends random integers (so sums are
    exact) that add up to the block."""
    pieces = lay_out(whole, layout, sizes)
    rng = np.random.default_rng(seed)
    comps = parts(layout)
    coords = list(np.ndindex(*sizes))
    for k, c in enumerate(coords):
        if any(a == P and x != 0 for a, x in zip(comps, c)):
            noise = rng.integers(-5, 5, pieces[k].shape).astype(whole.dtype)
            owner = coords.index(tuple(0 if a == P else x for a, x in zip(comps, c)))
            pieces[k] = pieces[k] + noise
            pieces[owner] = pieces[owner] - noise
    return pieces


def holds(pieces, whole: np.ndarray, layout, sizes) -> list[int]:
    """The devices whose piece is not their index set of ``whole`` in ``layout`` (P groups summed)."""
    comps = parts(layout)
    coords = list(np.ndindex(*sizes))
    wrong = []
    for k, c in enumerate(coords):
        block = whole[block_index(layout, c, sizes, whole.shape)]
        group = [m for m, d in enumerate(coords) if all(x == y for x, y, a in zip(c, d, comps) if a != P)]
        if any(a == P for a in comps):
            total = sum(pieces[m] for m in group) if all(pieces[m].shape == block.shape for m in group) else None
        else:
            total = pieces[k] if pieces[k].shape == block.shape else None
        if total is None or not np.array_equal(total, block):
            wrong.append(k)
    return wrong


def check_transition(src, dst, shape, sizes, seed=0):
    mesh = make_mesh(sizes, None, (1e-6,), (1e9,))
    whole = np.arange(math.prod(shape), dtype=np.float64).reshape(shape) + 1
    steps = plan(src, dst, shape, whole.nbytes, mesh)
    pieces = addends(whole, src, sizes, seed)
    state = list(parts(src))
    for step in steps:
        assert state[step.axis] == step.before
        pieces, received = run_step(pieces, step, sizes)
        state[step.axis] = step.after
        layout = state[0] if len(state) == 1 else MeshLayout(state)
        assert holds(pieces, whole, layout, sizes) == [], (src, dst, step)  # every intermediate layout, exactly
        # the bytes received over the devices are what the step was priced for (per device too where the
        # group's elements divide evenly; a ring all-reduce of 1 element on 3 devices cannot)
        assert sum(received) == pytest.approx(step.volume(sizes[step.axis]) * len(pieces), rel=1e-12), (src, dst, step)
        assert step.seconds == (0.0 if step.collective is None else
                                collective_time(step.collective, step.group_bytes, mesh.axes[step.axis]))
    assert tuple(state) == parts(dst)
    assert reshard_time(src, dst, shape, whole.nbytes, mesh) == sum(s.seconds for s in steps)


def domain(shape, sizes):
    return candidate_layouts(shape, make_mesh(sizes), [True] * len(sizes))[0]


@pytest.mark.parametrize("sizes,shape", [((4,), (8, 12)), ((2, 2), (4, 6, 2)), ((2, 4), (8, 8)),
                                         ((2, 2, 2), (4, 2))])
def test_every_transition_moves_exactly_its_index_sets(sizes, shape):
    """Every (source, target) pair of layouts the catalog may ask for (P included) on the mesh."""
    layouts = domain(shape, sizes)
    assert len(layouts) >= 2 + len(shape) ** len(sizes)
    for src, dst in itertools.product(layouts, layouts):
        check_transition(src, dst, shape, sizes)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.lists(st.integers(1, 3), min_size=1, max_size=3),
       st.data())
def test_random_meshes_and_shapes(sizes, factors, data):
    """Random meshes (1 to 3 axes of 1 to 4 devices) and tensor shapes: every priced transition moves
    exactly the index sets it claims, and exactly the bytes it was priced for."""
    devices = math.prod(sizes)
    shape = tuple(f * data.draw(st.sampled_from([1, devices])) for f in factors)
    layouts = domain(shape, tuple(sizes))
    src, dst = data.draw(st.sampled_from(layouts)), data.draw(st.sampled_from(layouts))
    check_transition(src, dst, shape, tuple(sizes), seed=data.draw(st.integers(0, 99)))


def test_a_one_axis_mesh_prices_the_catalog_single_collective():
    mesh = make_mesh((4,), None, (1e-6,), (1e9,))
    for a, b in itertools.product([R, P, S(0), S(1)], [R, S(0), S(1)]):
        steps = plan(a, b, (8, 8), 8e6, mesh)
        kinds = [s.collective for s in steps if s.collective is not None]
        assert kinds == ([reshard(a, b)] if reshard(a, b) else [])
        assert reshard_time(a, b, (8, 8), 8e6, mesh) == pytest.approx(
            collective_time(reshard(a, b), 8e6, mesh.axes[0]) if reshard(a, b) else 0.0)


def L(*components):  # noqa: N802 - a 2-D layout from its components
    return MeshLayout(components)


def test_nested_sharding_is_not_one_all_gather():
    """Issue 28: on 2x4 S(0)S(0) -> RS(0) was priced as one all-gather along x on a quarter of the bytes,
    which leaves strided pieces; RS(0) -> S(0)S(0) was priced free, though 6 of 8 devices lack their
    target piece. Simulated here, then priced by steps that move the right index sets."""
    sizes, shape = (2, 4), (8, 3)
    mesh = make_mesh(sizes, None, (1e-6,), (1e9,))
    whole = np.arange(24.0).reshape(shape)
    old = Step(0, S(0), R, "all-gather", whole.nbytes / 4, collective_time("all-gather", whole.nbytes / 4, mesh.axes[0]))
    pieces, _ = run_step(lay_out(whole, L(S(0), S(0)), sizes), old, sizes)
    assert holds(pieces, whole, L(R, S(0)), sizes) == list(range(8))  # x gathers blocks 4 apart: rows {0, 4}...
    free = Step(0, R, S(0), None, whole.nbytes / 4, 0.0)  # each device slicing its own rows along x
    pieces, _ = run_step(lay_out(whole, L(R, S(0)), sizes), free, sizes)
    assert holds(pieces, whole, L(S(0), S(0)), sizes) == [1, 2, 3, 4, 5, 6]  # 6 of 8 without their piece
    for src, dst in ((L(S(0), S(0)), L(R, S(0))), (L(R, S(0)), L(S(0), S(0)))):
        steps = plan(src, dst, shape, whole.nbytes, mesh)
        assert sum(s.seconds for s in steps) > old.seconds
        check_transition(src, dst, shape, sizes)


@pytest.mark.parametrize("sizes", [(4,), (2, 4), (2, 2, 2)])
def test_tensors_priced_together_cost_what_their_steps_cost(sizes):
    """price_tables (every tensor of a divisibility at once, Bellman-Ford over arrays) gives, float for float,
    the seconds of the steps plan() returns for each pair — the table the searches read is what runs."""
    mesh = make_mesh(sizes, latencies=(5e-6,), bandwidths=(25e9,))
    rng = np.random.default_rng(len(sizes))
    tensors = []
    for _ in range(24):
        shape = tuple(int(s) for s in rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24], size=rng.integers(1, 4)))
        domain, _ = candidate_layouts(shape, mesh, [True] * len(sizes))
        tensors.append((domain, shape, float(rng.choice([0.0, 8.0, rng.uniform(1, 1e4), rng.uniform(1e6, 1e9)]))))
    for (domain, shape, nbytes), (index, seconds) in zip(tensors, price_tables(tensors, mesh)):
        for a, b in itertools.product(domain, repeat=2):
            assert seconds[index[a], index[b]] == sum(s.seconds for s in plan(a, b, shape, nbytes, mesh)), (a, b)
