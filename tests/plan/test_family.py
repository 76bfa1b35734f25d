"""The plan family on small real models: its proven bound against every plan of the family priced in full
(a brute force), the known answers of issue 41 (one device, one node against tile, tile disabled against
partition's optimum), and a stage over memory never chosen."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxpart import partition, plan
from onnxpart.cli.common import load_costed
from onnxpart.plan.cluster import read_cluster
from onnxpart.plan.evaluate import evaluate
from onnxpart.plan.model import Problem, Shape

WIDTHS = (64, 256, 128, 512, 64, 256, 32)


def chain_model(path: Path, widths=WIDTHS, rows: int = 64) -> Path:
    """MatMul, Relu, MatMul, Relu … on [rows, width] tensors of varying widths: a chain of unequal ops."""
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        w = numpy_helper.from_array(np.full((a, b), 0.01, np.float32), f"w{i}")
        inits.append(w)
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, widths[0]])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [rows, widths[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def cluster_file(path: Path, nodes: int, devices: int, latency: str = "5us") -> str:
    path.write_text(f"nodes: {nodes}\ndevices_per_node: {devices}\ndevice: a100\n"
                    f"intra_node: {{bandwidth: 300GB/s, latency: {latency}}}\n"
                    f"inter_node: {{bandwidth: 25GB/s, latency: {latency}}}\n")
    return str(path)


def problem(model: Path, cluster: str, objective: str = "latency", batch: int = 1, **kw) -> Problem:
    loaded = load_costed(model, fmt="auto", input_shape=None, force_shape=False, dim=None, coarsen=None, costs=None,
                         cost="analytic", device="a100")
    return Problem(loaded.graph, read_cluster(cluster), objective, batch, **kw)


def family(pb: Problem):
    """Every shape of the plan family: each cut of the units into runs, each run on each mesh, each replica
    count, the meshes' devices within the cluster's."""
    count = pb.units.count
    for cuts in itertools.product((False, True), repeat=count - 1):
        bounds = [0] + [k + 1 for k, cut in enumerate(cuts) if cut] + [count]
        runs = list(zip(bounds, bounds[1:]))
        for meshes in itertools.product(pb.meshes, repeat=len(runs)):
            for replicas, micro in pb.replica_options():
                if replicas * sum(m.size for m in meshes) <= pb.cluster.devices:
                    yield Shape(tuple((tuple(pb.units.ops(i, j)), m) for (i, j), m in zip(runs, meshes)),
                                replicas, micro, tuple(runs))


@pytest.mark.parametrize("cluster,objective,batch", [((1, 4), "latency", 1), ((2, 2), "latency", 1),
                                                      ((1, 4), "throughput", 4), ((2, 2), "throughput", 8)])
def test_bound_below_every_plan_and_plan_at_the_brute_force(tmp_path, cluster, objective, batch) -> None:
    """No plan of the family (priced in full) is below the certificate's bound — an incumbent posted as the
    bound fails here — and the answer is the brute force's best, up to the transfers the search estimates."""
    model = chain_model(tmp_path / "chain.onnx", WIDTHS[:5])
    pb = problem(model, cluster_file(tmp_path / "c.yaml", *cluster), objective, batch)
    solution = plan.solve(pb, plan.Options(time_limit=20))
    priced = [evaluate(pb, shape, solution.table, 0.05) for shape in family(pb)]
    best = min(p.value for p in priced if p.fits)
    assert solution.best_lower_bound <= best * (1 + 1e-9)
    assert solution.best_lower_bound <= solution.value * (1 + 1e-9)
    assert solution.value <= best * 1.02
    for result in solution.results:
        assert result.value is None or solution.value <= result.value * (1 + 1e-12)


def test_one_device_is_the_model_itself(tmp_path) -> None:
    model = chain_model(tmp_path / "chain.onnx")
    pb = problem(model, "1x1:a100")
    solution = plan.solve(pb, plan.Options(time_limit=10))
    assert len(solution.priced.stages) == 1 and solution.priced.shape.replicas == 1
    assert solution.value == pytest.approx(sum(op.work for op in pb.graph.ops), rel=1e-12)
    assert all(str(a) == "R" for a in solution.priced.stages[0].layouts.values())


def test_one_node_at_least_as_good_as_tile(tmp_path) -> None:
    from onnxpart import tile
    from onnxpart.onnx_constants import small_constants
    from onnxpart.tile.onnx import LayoutOptions
    from onnxpart.tile.onnx.build import build_layout_instance

    model = Path(__file__).resolve().parents[2] / "fixtures" / "transformer_block.onnx"
    pb = problem(model, "1x4:a100", constants=small_constants(onnx.load(model)))
    solution = plan.solve(pb, plan.Options(time_limit=20))
    inst = build_layout_instance(pb.graph, 4, pb.cluster.intra.bandwidth, pb.cluster.intra.latency,
                                 constants=pb.constants, device=pb.cluster.spec)
    alone = tile.solve(inst, LayoutOptions(time_limit=10))
    assert solution.value <= alone.cost * (1 + 1e-9)


def test_tile_disabled_equals_partitions_optimum(tmp_path) -> None:
    """One device per stage, one replica, free latency and a batch so long that the period decides: the plan's
    slowest stage is partition's proven optimum on the chain (the same stage model: Eq. 3)."""
    model = chain_model(tmp_path / "chain.onnx")
    pb = problem(model, cluster_file(tmp_path / "c.yaml", 1, 3, latency="0s"), "throughput", 10**6,
                 micro_batches=10**6, mesh_sizes=(1,))
    solution = plan.solve(pb, plan.Options(methods=("dp",), time_limit=10))
    from onnxpart.partition.model import from_graph

    inst = from_graph(pb.graph, bandwidth=pb.cluster.intra.bandwidth)
    best = partition.solve(inst, partition.Options(k=3, time_limit=10, bounds=("simple",), workers=1))
    assert best.proven_optimal or best.gap < 1e-9
    assert max(solution.priced.periods) == pytest.approx(best.value, rel=1e-9)


def test_a_stage_over_memory_is_never_emitted(tmp_path) -> None:
    """With each device holding a bit more than half the weights, no plan runs the model on one device: the
    answer's every device fits, and a one-device row says it does not."""
    model = chain_model(tmp_path / "chain.onnx")
    pb = problem(model, "1x4:a100")
    weights = sum(p.bytes for p in pb.graph.params.values())
    activations = sum(t.bytes for t in pb.graph.tensors.values())
    memory = (weights + activations) * 0.6
    (tmp_path / "small.yaml").write_text(
        "nodes: 1\ndevices_per_node: 4\ndevice: a100\n" f"memory: {int(memory)}\n")
    pb = problem(model, str(tmp_path / "small.yaml"))
    solution = plan.solve(pb, plan.Options(time_limit=10))
    assert solution.priced.fits
    assert all(m["total"] <= memory for m in solution.priced.memory)
    assert not solution.one_device.fits
