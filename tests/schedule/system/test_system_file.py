"""System files (load_system) and the instance's bad-input errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from onnxpart.errors import InfeasibleError, UserError
from onnxpart.schedule import Instance, load_system
from tests.conftest import FIXTURES

SYSTEMS = FIXTURES / "systems"

GOOD = """\
devices:
  - name: cpu
    spec: cpu
    batch_sizes: [1, 8]
  - name: gpu
    spec: t4
    count: 2
    memory: 8GiB
links:
  default: {bandwidth: 10GB/s, latency: 1us}
  pairs:
    - {from: cpu, to: gpu, bandwidth: 16GB/s, latency: 10us, both_ways: true}
    - {from: gpu, to: gpu, bandwidth: 100GB/s}
"""


def write(tmp_path: Path, text: str, name: str = "system.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_file(tmp_path):
    system = load_system(str(write(tmp_path, GOOD)))
    assert system.names == ["cpu", "gpu:0", "gpu:1"]
    assert system.devices[1].memory == 8 * 2**30 and system.devices[0].batch_sizes == (1, 8)
    assert system.links[(0, 1)].bandwidth == 16e9 and system.links[(1, 0)].latency == pytest.approx(10e-6)
    assert system.links[(1, 2)].bandwidth == 100e9 and system.links[(1, 2)].latency == 0.0
    delay, path = system.route(1, 2, 1e9)
    assert path == (1, 2) and delay == pytest.approx(0.01 + 5e-6)  # + the T4's launch: a switch onto gpu:1


def test_a_switch_costs_the_receivers_launch_by_default_or_what_the_file_says(tmp_path):
    """Every transfer into a device pays its switch cost once, however it is routed: the spec's op_overhead
    (the T4's 5 µs), or the device entry's ``switch``."""
    system = load_system(str(write(tmp_path, GOOD.replace("    batch_sizes: [1, 8]", "    switch: 30us"))))
    assert [d.switch for d in system.devices] == pytest.approx([30e-6, 5e-6, 5e-6])
    assert system.route(1, 0, 16e3)[0] == pytest.approx(10e-6 + 1e-6 + 30e-6)
    assert system.route(0, 2, 16e3)[0] == pytest.approx(10e-6 + 1e-6 + 5e-6)
    assert system.delay_matrix(16e3) == pytest.approx(np.array([[system.route(u, v, 16e3)[0] for v in range(3)]
                                                                for u in range(3)]))
    inst = Instance(np.ones((2, 3)), [(0, 1, 16e3)], system=system)
    assert inst.delays[0, 1, 0] == pytest.approx(41e-6) and inst.delays[0, 1, 1] == 0.0


@pytest.mark.parametrize("name", ["cpu_t4_a100.yaml", "multinode_6x4.yaml"])
def test_shipped_systems(name):
    system = load_system(str(SYSTEMS / name))
    assert system.k in (3, 24)
    assert all(system.route(u, v)[0] < math.inf for u in range(system.k) for v in range(system.k))


def test_json(tmp_path):
    path = write(tmp_path, '{"devices": [{"name": "a", "memory": 100}, {"name": "b", "memory": "1KiB"}],\n'
                           ' "links": {"pairs": [{"from": "a", "to": "b", "bandwidth": "1GB/s"}]}}', "s.json")
    system = load_system(str(path))
    assert system.devices[1].memory == 1024 and (0, 1) in system.links and (1, 0) not in system.links
    bad = write(tmp_path, '{"devices": [\n  {"name": "a",}\n]}', "bad.json")
    with pytest.raises(UserError, match=r"bad.json: line 2: not valid JSON"):
        load_system(str(bad))


@pytest.mark.parametrize("text, pattern", [
    (GOOD.replace("to: gpu, bandwidth: 16", "to: tpu, bandwidth: 16"),
     r"system.yaml: links.pairs\[0\].to \(line 12\): unknown device 'tpu': the system has cpu, gpu"),
    (GOOD.replace("count: 2", "count: -1"), r"devices\[1\].count \(line 7\): must be an integer from 1 to 4096, got -1"),
    (GOOD.replace("100GB/s", "fast"), r"links.pairs\[1\].bandwidth \(line 13\): cannot read 'fast' as a bandwidth"),
    (GOOD.replace("memory: 8GiB", "memory: -3"), r"devices\[1\].memory \(line 8\): must be a size from 0 B to 1 PiB, got -3"),
    (GOOD.replace("spec: t4", "spec: tpu9"), r"devices\[1\].spec \(line 6\): unknown device 'tpu9'"),
    (GOOD.replace("batch_sizes: [1, 8]", "batch_sizes: [0]"), r"devices\[0\].batch_sizes\[0\] \(line 4\): must be an integer from 1 to 65536, got 0"),
    (GOOD.replace("    spec: cpu\n", "    sepc: cpu\n"), r"devices\[0\].sepc \(line 3\): unknown key"),
    (GOOD.replace("- name: gpu", "- name: cpu"), r"devices\[1\].name \(line 5\): device 'cpu' is listed twice"),
    (GOOD.replace("latency: 1us", "latency: soon"), r"links.default.latency \(line 10\): cannot read 'soon'"),
    ("links: {}\n", r"system.yaml: devices \(line 1\): missing"),
    ("devices: [a, b]\n", r"devices\[0\] \(line 1\): expected a mapping"),
    ("devices:\n  - name: a\n   bad: [\n", r"system.yaml: line \d+: not valid YAML"),
])
def test_bad_files(tmp_path, text, pattern):
    with pytest.raises(UserError, match=pattern):
        load_system(str(write(tmp_path, text)))


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="system file .*nope.yaml does not exist"):
        load_system(str(tmp_path / "nope.yaml"))


def test_routing_and_impossible_transfer(tmp_path):
    text = ("devices: [{name: a}, {name: b}, {name: c}]\n"
            "links:\n  pairs:\n    - {from: a, to: c, bandwidth: 1}\n    - {from: c, to: b, bandwidth: 2}\n")
    system = load_system(str(write(tmp_path, text)))
    delay, path = system.route(0, 1, 4.0)
    assert path == (0, 2, 1) and delay == pytest.approx(4 / 1 + 4 / 2)
    assert system.route(1, 0, 4.0) == (math.inf, ())
    time = [[1, math.inf, math.inf], [math.inf, 1, math.inf]]
    Instance(time, [(0, 1, 4.0)], system=system)  # a → b: routed through c
    with pytest.raises(InfeasibleError, match=r"op1 → op0 \(4 bytes\) cannot be transferred.*b → a"):
        Instance(time, [(1, 0, 4.0)], system=system)


def test_op_fits_no_device():
    with pytest.raises(InfeasibleError, match=r"op big needs 500 bytes .* largest device it can run on, d1, has 300"):
        Instance(np.ones((2, 2)), [(0, 1, 1.0)], mem=[10, 500], capacity=[200, 300], op_names=["small", "big"])
