"""scripts/bench_tile.py: its instance generators and report on tiny sizes (no BENCHMARKS.md write)."""

from __future__ import annotations

import importlib.util
from argparse import Namespace
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_tile.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_tile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chlp_generator_is_k_uniform_and_capped():
    bench = _load()
    inst = bench.chlp_instance(10, 3, 9, 3, 1.0, seed=0)
    assert inst.n == 10 and inst.m == 10
    assert all(len(e.vertices) == 3 and len(e.tuples) == 9 for e in inst.edges)
    assert bench.chlp_instance(4, 3, 9, 3, 5.0, seed=0).m == 4  # capped at C(4, 3)
    again = bench.chlp_instance(10, 3, 9, 3, 1.0, seed=0)
    assert [e.tuples for e in again.edges] == [e.tuples for e in inst.edges]


def test_rows_and_report_on_tiny_sizes():
    bench = _load()
    chlp = bench.chlp_rows([10], [0], 3, 9, 3, 1.0, time_limit=5)
    programs = bench.program_rows([(4, 10)], [0], time_limit=5)
    for row in chlp + programs:
        m = row["methods"]
        assert m["exact"]["cost"] <= m["greedy"]["cost"]
        assert m["exact"]["status"] == "optimal"
    args = Namespace(time_limit=5, repeats=1, k=3, s=9, tau=3, density=1.0)
    paper = bench.paper_rows(5, 1)
    assert len(paper) == 10
    assert any(r["methods"]["exhaustive"]["status"] == "refused" and r["methods"]["exhaustive"]["refused_size"]
               for r in paper)
    text = bench.markdown(paper, chlp, programs, args, "test", 0.0)
    assert "refused (size" in text and "| target | verdict | detail |" in text


def test_onnx_mesh_rows_and_report(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_tile_onnx", SCRIPT.parent / "bench_tile_onnx.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from tests.tile.onnx.onnx_models import mlp

    model = Path(mlp(tmp_path / "mlp.onnx", batch=64, d_in=256, d_hidden=1024, d_out=256))
    rows = bench.model_rows("mlp", model, ((2,), (2, 2)), time_limit=10, workers=1, verify=True)
    assert [(r["mesh"], r["memory"] is None) for r in rows] == [("2", True), ("2", False), ("2x2", True), ("2x2", False)]
    for row in rows:
        m = row["methods"]
        assert m["exact"]["status"] == "optimal" and row["gap"] < 1e-9
        assert m["exact"]["cost"] <= m["greedy"]["cost"] * (1 + 1e-12) <= m["local"]["cost"] * (1 + 1e-12)
        assert m["exhaustive"]["status"] == "refused" or m["exhaustive"]["cost"] == pytest.approx(m["exact"]["cost"])
        assert row["verify"]["ok"]
        if row["memory"] is not None:
            assert row["memory_used"] <= row["memory"] * (1 + 1e-12)
    text = bench.markdown(rows, "test", 0.0, "machine", 10, quick=True)
    assert "| target | verdict | detail |" in text and "NOT MET" in text  # no model here has 300 tensors
    assert "| every plan passes --verify | MET | 4/4 rows" in text
    assert all(row["bound"] <= row["best"] * (1 + 1e-9) and row["one_device"] > 0 for row in rows)


def test_megatron_rows_and_report():
    spec = importlib.util.spec_from_file_location("bench_tile_megatron", SCRIPT.parent / "bench_tile_megatron.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tiny = {"gpt2-medium": ("gpt2", 64, 4, 256, 32), "llama-7b": ("llama", 64, 4, 192, 32)}
    rows = bench.rows(10, 1, meshes=((2,), (2, 2)), shapes=tiny)
    assert [(r["model"], r["mesh"]) for r in rows] == [(m, mesh) for m in tiny for mesh in ("2", "2x2")]
    for row in rows:
        assert row["status"] == "optimal" and row["exact"] <= row["megatron"] * (1 + 1e-12)
        assert row["bound"] <= row["exact"] * (1 + 1e-9)
    text = bench.markdown(rows, 10)
    assert "| exact ≤ Megatron on every row | MET | 4/4 rows |" in text
