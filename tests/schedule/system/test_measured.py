"""Measured costs per batch size: the system file's ``costs: {B: file}``, the interpolation rule of
:mod:`onnxpart.schedule.system.batch_curve`, the batch-1 time for latency, per-batch slice times for throughput
(and in ``--check-certificate``), the errors for a bad costs entry, and ``annotate --batch``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxpart.cli.app import app
from onnxpart.errors import UserError
from onnxpart.graph import OpGraph
from onnxpart.loading import load_costed
from onnxpart.schedule import from_graph, load_system
from onnxpart.schedule.common.emit import instance_digest
from onnxpart.schedule.system.batch_curve import BatchCurve
from tests.conftest import FIXTURES

runner = CliRunner()
DIAMOND = FIXTURES / "diamond.onnx"
SYMBOLIC = FIXTURES / "symbolic.onnx"


def _curve(sizes, times, fixed=0.0) -> BatchCurve:
    return BatchCurve(tuple(sizes), np.array([times], dtype=float), np.array([fixed]))


def test_rule_at_between_above_and_below_the_measured_sizes():
    c = _curve([2, 4, 8], [3.0, 5.0, 6.0])
    assert [c.at(0, b) for b in (2, 4, 8)] == [3.0, 5.0, 6.0]  # measured sizes: the measurements
    assert c.at(0, 3) == pytest.approx(4.0) and c.at(0, 6) == pytest.approx(5.5)  # linear between
    assert c.at(0, 16) == pytest.approx(6.0 + 0.25 * 8)  # above: last slope (6 − 5)/(8 − 4)
    assert c.at(0, 1) == pytest.approx(2.0)  # below: first slope (5 − 3)/(4 − 2), 3 − 1·1 ≥ 3·1/2
    steep = _curve([4, 8], [1.0, 9.0])  # the first segment extrapolates to a negative fixed part
    assert steep.at(0, 1) == pytest.approx(1.0 / 4)  # so proportional scaling: 1·1/4, not 1 − 2·3 < 0
    noisy = _curve([1, 8, 32], [2.0, 9.0, 8.0])  # more inputs, less time: noise
    assert noisy.at(0, 64) == pytest.approx(8.0)  # the negative last slope is clipped to 0
    flat_below = _curve([8, 32], [9.0, 8.0])
    assert flat_below.at(0, 2) == pytest.approx(9.0)  # clipped slope: 9 − 0, above 9·2/8


def test_rule_with_one_measured_size_is_the_scaling_rule():
    assert _curve([1], [2.0], fixed=0.5).at(0, 4) == pytest.approx(0.5 + 1.5 * 4)  # today's rule at batch 1
    assert _curve([4], [2.0], fixed=0.5).at(0, 8) == pytest.approx(0.5 + 1.5 * 2)  # per input 1.5/4
    assert _curve([4], [2.0], fixed=3.0).at(0, 2) == pytest.approx(2.0)  # fixed part at most the time: all of it


# ----------------------------------------------------------------------------------------- files
def _graph() -> OpGraph:
    return load_costed(DIAMOND).graph


def _costs(tmp_path, name: str, work, batch: int | None = None) -> str:
    """A costs file of the diamond model with ``work(i)`` seconds for op ``i`` (``batch`` recorded if given)."""
    path = tmp_path / "annotated.json"
    if not path.exists():
        assert runner.invoke(app, ["annotate", str(DIAMOND), "-o", str(path)]).exit_code == 0
    data = json.loads(path.read_text())
    for i, op in enumerate(data["ops"]):
        op["work"] = work(i)
    data.pop("batch", None)
    if batch is not None:
        data["batch"] = batch
    (tmp_path / name).write_text(json.dumps(data))
    return name


def _system(tmp_path, costs: str, sizes: str = "[1, 2, 4, 8]", extra: str = "") -> str:
    path = tmp_path / "system.yaml"
    path.write_text(f"devices:\n  - name: gpu\n    count: 2\n    batch_sizes: {sizes}\n    costs: {costs}\n{extra}"
                    "links:\n  default: {bandwidth: 1GB/s}\n")
    return str(path)


def test_measured_sizes_give_their_times_and_interpolate_between(tmp_path):
    b1 = _costs(tmp_path, "b1.json", lambda i: 1e-3 * (i + 1), batch=1)
    b8 = _costs(tmp_path, "b8.json", lambda i: 4e-3 * (i + 1), batch=8)
    inst = from_graph(_graph(), load_system(_system(tmp_path, f"{{8: {b8}, 1: {b1}}}")))
    for i in range(inst.n):
        t1, t8 = 1e-3 * (i + 1), 4e-3 * (i + 1)
        for u in range(inst.k):
            assert inst.time[i, u] == pytest.approx(t1)  # latency: the batch-1 measurement
            assert inst.time_batch(i, u, 1) == pytest.approx(t1)
            assert inst.time_batch(i, u, 8) == pytest.approx(t8)  # scaling t1 would give 8·t1
            assert inst.time_batch(i, u, 4) == pytest.approx(t1 + (4 - 1) * (t8 - t1) / (8 - 1))
            assert inst.time_batch(i, u, 16) == pytest.approx(t8 + 8 * (t8 - t1) / 7)
    sub, _ = inst.subinstance([2, 3])
    assert sub.time_batch(0, 1, 8) == pytest.approx(4e-3 * 3)  # a sub-instance keeps its ops' curves


def test_devices_with_different_batch_curves_are_not_interchangeable(tmp_path):
    """Same batch-1 times, different batch-8 times: swapping the devices changes the throughput."""
    b1 = _costs(tmp_path, "b1.json", lambda i: 1e-3)
    fast = _costs(tmp_path, "fast.json", lambda i: 2e-3)
    slow = _costs(tmp_path, "slow.json", lambda i: 7e-3)
    path = tmp_path / "system.yaml"
    path.write_text(f"devices:\n  - {{name: a, batch_sizes: [1, 8], costs: {{1: {b1}, 8: {fast}}}}}\n"
                    f"  - {{name: b, batch_sizes: [1, 8], costs: {{1: {b1}, 8: {slow}}}}}\n"
                    "links:\n  default: {bandwidth: 1GB/s}\n")
    inst = from_graph(_graph(), load_system(path))
    assert np.array_equal(inst.time[:, 0], inst.time[:, 1])
    assert inst.symmetry_classes() == [[0], [1]] and not inst.preserved_by([1, 0])
    same = from_graph(_graph(), load_system(_system(tmp_path, f"{{1: {b1}, 8: {fast}}}")))
    assert same.symmetry_classes() == [[0, 1]]
    other = from_graph(_graph(), load_system(_system(tmp_path, f"{{1: {b1}, 8: {slow}}}")))
    assert instance_digest(same) != instance_digest(other)  # the certificate hash sees the batch-8 file


def test_single_file_form_still_means_batch_1(tmp_path):
    b1 = _costs(tmp_path, "b1.json", lambda i: 1e-3)
    inst = from_graph(_graph(), load_system(_system(tmp_path, b1)))
    assert inst.time_batch(0, 0, 4) == pytest.approx(4e-3)  # no spec: no fixed part, scaled per input


@pytest.mark.parametrize("costs, expected", [
    ("{1: b1.json, 8: b1.json}", "devices[0].costs.8 (line 5): b1.json was measured at batch 1, not 8"),
    ("b8.json", "devices[0].costs (line 5): b8.json was measured at batch 8, not 1: list it as costs: {8: b8.json}"),
    ("{1: b1.json, 8: gone.json}", "devices[0].costs.8 (line 5): costs file"),
    ("{0: b1.json}", "devices[0].costs.0 (line 5): batch size: must be an integer from 1 to 65536, got '0'"),
    ("{1: b1.json, eight: b8.json}", "devices[0].costs.eight (line 5): batch size: cannot read 'eight' as a number"),
    ("{}", "devices[0].costs (line 5): expected a costs file or a mapping"),
])
def test_a_bad_costs_entry_is_one_line_naming_the_key(tmp_path, costs, expected):
    _costs(tmp_path, "b1.json", lambda i: 1e-3, batch=1)
    _costs(tmp_path, "b8.json", lambda i: 2e-3, batch=8)
    system = _system(tmp_path, costs)
    with pytest.raises(UserError) as info:
        load_system(system)
    assert str(info.value).startswith(f"{system}: {expected}"), str(info.value)
    result = runner.invoke(app, ["schedule", str(DIAMOND), "--system", system, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) <= 3, result.output
    assert not (tmp_path / "out").exists()


def test_a_measured_file_missing_an_op_is_refused_naming_it(tmp_path):
    _costs(tmp_path, "b1.json", lambda i: 1e-3)
    b8 = tmp_path / _costs(tmp_path, "b8.json", lambda i: 2e-3)
    data = json.loads(b8.read_text())
    missing = data["ops"].pop(3)["name"]
    b8.write_text(json.dumps(data))
    system = _system(tmp_path, "{1: b1.json, 8: b8.json}")
    result = runner.invoke(app, ["schedule", str(DIAMOND), "--system", system, "-o", str(tmp_path / "out"),
                                 "--objective", "throughput", "--batch", "8"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"no measured time for op {missing}" in text and "batch 8" in text, text


# ----------------------------------------------------------------------------------------- end to end
def test_throughput_uses_per_batch_times_and_the_certificate_checks(tmp_path):
    t1 = [1e-3 * (1 + i % 3) for i in range(7)]
    t4 = [2.5 * t for t in t1]
    _costs(tmp_path, "b1.json", lambda i: t1[i], batch=1)
    _costs(tmp_path, "b4.json", lambda i: t4[i], batch=4)
    system = _system(tmp_path, "{1: b1.json, 4: b4.json}", sizes="[1, 2, 4]")
    out = tmp_path / "out"
    result = runner.invoke(app, ["schedule", str(DIAMOND), "--system", system, "-o", str(out), "--objective",
                                 "throughput", "--batch", "8", "--time-limit", "3"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    index = {op["name"]: i for i, op in enumerate(json.loads((tmp_path / "b1.json").read_text())["ops"])}
    expected = {1: lambda i: t1[i], 2: lambda i: t1[i] + (t4[i] - t1[i]) / 3, 4: lambda i: t4[i]}
    for s in manifest["ops"]:  # every slice lasts its measured (or interpolated) time
        assert s["end"] - s["start"] == pytest.approx(expected[s["batch"]](index[s["name"]]), rel=1e-9), s
    assert any(s["batch"] > 1 for s in manifest["ops"])
    check = ["schedule", str(DIAMOND), "--system", system, "--check-certificate", str(out)]
    checked = runner.invoke(app, check)
    assert checked.exit_code == 0 and "certificate ok" in checked.output, checked.output
    _costs(tmp_path, "b4.json", lambda i: 3 * t1[i], batch=4)  # other batch-4 times: not this certificate
    refused = runner.invoke(app, check)
    assert refused.exit_code == 2 and "certificate check failed" in refused.output, refused.output


def test_annotate_batch_sets_the_batch_dim_and_records_it(tmp_path):
    one, four = tmp_path / "one.json", tmp_path / "four.json"
    assert runner.invoke(app, ["annotate", str(SYMBOLIC), "--dim", "N=2", "-o", str(one)]).exit_code == 0
    result = runner.invoke(app, ["annotate", str(SYMBOLIC), "--dim", "N=2", "--batch", "4", "-o", str(four)])
    assert result.exit_code == 0, result.output
    a, b = json.loads(one.read_text()), json.loads(four.read_text())
    assert a["batch"] == 1 and b["batch"] == 4
    shapes = {t["name"]: t["shape"][0] for t in b["tensors"] if t["producer"] is None}
    assert set(shapes.values()) == {8}  # 4 inputs of 2 rows each
    assert sum(op["work"] for op in b["ops"]) > sum(op["work"] for op in a["ops"])
    measured = tmp_path / "measured.json"
    result = runner.invoke(app, ["annotate", str(SYMBOLIC), "--cost", "measured", "--runs", "1", "--batch", "3",
                                 "-o", str(measured)])
    assert result.exit_code == 0 and json.loads(measured.read_text())["batch"] == 3, result.output
    fixed = runner.invoke(app, ["annotate", str(DIAMOND), "--batch", "4", "-o", str(tmp_path / "d.json")])
    assert fixed.exit_code == 2 and "fixed size" in fixed.output and not (tmp_path / "d.json").exists()
