"""The MTPP instance and Eq. (3)'s block cost, from an OpGraph and from the dnn-partitioning format."""

import json

import numpy as np
import pytest
from tests.conftest import SHARED, requires_shared
from tests.partition.partition_helpers import brute_force, random_instance

from onnxpart.errors import UserError
from onnxpart.partition.model import (Instance, _csr, block_costs, check_assignment, from_graph, simple_lower_bound,
                                      work_lower_bound)
from onnxpart.readers import is_dnn_partitioning, read_dnn_partitioning

DNN = SHARED / "benchmarks" / "dnn-partitioning" / "throughput-inputs"


def diamond(transfer=1.0) -> Instance:
    """a -> {b, c} with ONE tensor (two consumers), b -> d, c -> d."""
    ptr, idx = _csr([[1, 2], [3], [3]])
    return Instance("diamond", ("a", "b", "c", "d"), (("a",), ("b",), ("c",), ("d",)),
                    np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 0.0, 0.0, 50.0]), ("ta", "tb", "tc"),
                    np.array([0, 1, 2]), ptr, idx, np.array([transfer, 0.5, 0.25]), bandwidth=10.0)


def test_a_tensor_is_paid_once_per_direction_whatever_its_consumers():
    inst = diamond()
    costs = block_costs(inst, [0, 1, 1, 1], 2)  # ta crosses to b and c: paid once out, once in
    assert costs[0].io_out == pytest.approx(1.0) and costs[1].io_in == pytest.approx(1.0)
    assert costs[0].cost == pytest.approx(2.0) and costs[1].cost == pytest.approx(10.0)
    costs = block_costs(inst, [0, 1, 2, 2], 3)  # ta goes to two blocks: out once, in once in each
    assert costs[0].io_out == pytest.approx(1.0)
    assert costs[1].io_in == pytest.approx(1.0) and costs[1].io_out == pytest.approx(0.5)
    assert costs[2].io_in == pytest.approx(1.0 + 0.5)  # ta and tb; tc stays inside


def test_overflow_streams_parameters_beyond_stage_memory():
    import dataclasses

    inst = dataclasses.replace(diamond(), stage_memory=20.0)
    costs = block_costs(inst, [0, 0, 0, 0], 1)
    assert costs[0].overflow == pytest.approx((60.0 - 20.0) / 10.0)
    assert simple_lower_bound(inst, 1) == pytest.approx(10.0 + 4.0)


def test_check_assignment_rejects_backward_edges_and_bad_blocks():
    inst = diamond()
    check_assignment(inst, [0, 0, 1, 1], 2)
    with pytest.raises(ValueError):
        check_assignment(inst, [1, 0, 1, 1], 2)
    with pytest.raises(ValueError):
        check_assignment(inst, [0, 0, 1, 2], 2)


@pytest.mark.parametrize("seed", range(4))
def test_simple_bound_is_below_the_optimum(seed):
    inst = random_instance(6, seed, stage_memory=120.0)
    for k in (1, 2, 3):
        opt = brute_force(inst, k)
        assert work_lower_bound(inst, k) <= simple_lower_bound(inst, k) <= opt + 1e-12


@requires_shared
def test_dnn_partitioning_graph_is_read_with_colour_classes_contracted():
    path = DNN / "OperatorGraphs" / "bert_l-3_inference.json"
    data = json.loads(path.read_text())
    assert is_dnn_partitioning(data)
    inst = from_graph(read_dnn_partitioning(data, "bert3"))
    classes = {n.get("colorClass", ("solo", n["id"])) for n in data["nodes"]}
    assert inst.n == len(classes)
    assert inst.work.sum() == pytest.approx(sum(n["fpgaLatency"] for n in data["nodes"]))
    assert sum(len(m) for m in inst.members) == len(data["nodes"])
    costs = {e["sourceId"]: e["cost"] for e in data["edges"]}
    names = {str(n.get("name", n["id"])): n["id"] for n in data["nodes"]}
    for t, name in enumerate(inst.tensor_names):
        assert inst.transfer[t] == pytest.approx(costs[names[name]])
        assert (inst.consumers(t) > inst.producer[t]).all()  # topological order


def test_dnn_graph_edge_cases():
    data = {"nodes": [{"id": 1, "fpgaLatency": 1.0}, {"id": 2, "fpgaLatency": 2.0, "colorClass": 7},
                      {"id": 3, "fpgaLatency": 3.0, "colorClass": 7}],
            "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 1, "destId": 3, "cost": 0.5},
                      {"sourceId": 2, "destId": 3, "cost": 9.0}]}
    inst = from_graph(read_dnn_partitioning(data))
    assert inst.n == 2 and list(inst.work) == [1.0, 5.0]
    assert list(inst.transfer) == [0.5]  # 2 -> 3 is inside the colour class
    data["edges"].append({"sourceId": 1, "destId": 2, "cost": 0.7})
    with pytest.raises(UserError, match="two different outgoing edge costs"):
        read_dnn_partitioning(data)
    assert not is_dnn_partitioning({"ops": [], "tensors": []})
