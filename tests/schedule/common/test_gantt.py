"""gantt.png made to be read (:mod:`onnxpart.schedule.common.gantt`): the time axis in the title's unit with
no offset, op names (a slice's batch range) on the bars they fit, labels capped, and a long run of ops on
one device drawn as separate bars."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from onnxpart.schedule.common.gantt import MAX_LABELS, gantt_figure, gantt_png, labels


def op(name: str, start: float, end: float, device: str = "cpu", **more) -> dict:
    return {"name": name, "device": device, "start": start, "end": end, **more}


def test_bars_carry_their_op_name_or_slice_range_where_it_fits():
    ops = [op("conv_1", 0.0, 5.0), op("relu", 5.0, 5.01), op("matmul_7", 0.0, 5.0, inputs=[0, 32]),
           op("matmul_with_a_long_name", 5.0, 5.4, inputs=[32, 64])]
    assert labels(ops, 10.0) == {0: "conv_1", 2: "matmul_7 0–31", 3: "32–63"}  # relu: too narrow for any text


def test_labels_are_capped_widest_first():
    """300 ops on 100 devices (3 wide ops a row): every label fits, 80 are drawn, on the widest bars."""
    ops = [op(f"op{n}", n % 3 * 10.0, n % 3 * 10.0 + 9.0 + n / 1000, device=f"d{n // 3}") for n in range(300)]
    chosen = labels(ops, 30.0)
    assert len(chosen) == MAX_LABELS and set(chosen) == set(range(300 - MAX_LABELS, 300))


def test_time_axis_in_the_titles_unit_and_every_op_its_own_bar():
    """40 µs of 300 back-to-back ops on one device: the axis reads µs from 0 to 40 (no 1e-5 offset), and the
    row holds 300 bars in alternating shades (a solid band otherwise)."""
    ops = [op(f"op{n}", n * 40e-6 / 300, (n + 1) * 40e-6 / 300) for n in range(300)]
    transfers = [{"from": "cpu", "to": "gpu", "start": 1e-6, "end": 3e-6}]
    fig = gantt_figure(["cpu", "gpu"], ops, transfers, "model: makespan 40 µs")
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_xlabel() == "time (µs)" and ax.get_xlim() == pytest.approx((0.0, 40.0))
    assert ax.xaxis.get_offset_text().get_text() == ""
    cpu_row = ax.collections[0]
    assert len(cpu_row.get_paths()) == 300
    shades = cpu_row.get_facecolors()[:, 3]
    assert np.all(shades[0::2] == 1.0) and np.all(shades[1::2] < 1.0)
    plt.close(fig)
    assert gantt_png(["cpu", "gpu"], ops, transfers, "t").startswith(b"\x89PNG")
