"""Tiling ONNX models (``onnxpart tile``): the ``tile-onnx`` section of BENCHMARKS.md, run from
``scripts/bench_tile.py`` (``--onnx``, ``--onnx-only``).

Models, written as real ONNX files into a temporary folder by the repository's own builders:

* ``gpt``: a GPT-style decoder stack (:func:`make_big_model.build`: 12 layers, hidden 768, sequence 512,
  GELU MLP; attention as one head, no mask; sparse zero weights — the planner reads shapes only);
* ``bert``: a BERT-like encoder (:func:`make_fixtures.transformer_block`: 12 heads, hidden 768, MLP 3072,
  sequence 128, erf-GELU, Reshape/Transpose head split; 12 layers, 4 in ``--quick``);
* ``resnet50`` and ``inception_v1`` from the onnx wheel (``onnx/backend/test/data/light/``).

On meshes 2, 4, 8 and 2x4, without and with a ``--device-memory`` that binds: halfway between the least
memory any layout needs and what the unbounded best plan uses (when those are equal nothing can bind,
and the row says so). Per row: local / greedy / exhaustive / exact step time and seconds, exact's
status and proven gap; exhaustive enumerates only up to ``EXHAUSTIVE_LIMIT`` layouts (else ``refused``
with the size); with ``--onnx-verify`` the best plan runs under ``--verify``. Then the issue's targets,
each judged MET / NOT MET with the numbers.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_big_model  # noqa: E402
import make_fixtures  # noqa: E402

from onnxpart.verify import VerificationError  # noqa: E402
from onnxpart.loading import load_costed  # noqa: E402
from onnxpart.onnx_constants import small_constants  # noqa: E402
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.onnx.model import LayoutInstance  # noqa: E402
from onnxpart.tile.onnx import LayoutOptions, solve
from onnxpart.tile.onnx.exact import brute_force  # noqa: E402

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
MESHES = ((2,), (4,), (8,), (2, 4))
EXHAUSTIVE_LIMIT = 100_000
TARGET_TENSORS = 300
TARGET_1D_S, TARGET_2D_S = 10.0, 60.0


def build_models(folder: Path, quick: bool) -> dict[str, Path]:
    """The four benchmark models as ONNX files in ``folder`` (module docstring)."""
    hidden, layers = 768, 12
    gpt = make_big_model.build(folder / "gpt", layers * 12 * hidden * hidden * 4 / make_big_model.GIB,
                               hidden=hidden, seq=512, mlp_kind="gelu")
    assert gpt["layers"] == layers and not gpt["attention_only_blocks"] and not gpt["head_vocab"]
    bert = make_fixtures.transformer_block(seq=128, dim=hidden, heads=12, hidden=4 * hidden, layers=4 if quick else 12)
    onnx.save(bert, str(folder / "bert.onnx"))
    return {"gpt": Path(gpt["path"]), "bert": folder / "bert.onnx",
            "resnet50": LIGHT / "light_resnet50.onnx", "inception_v1": LIGHT / "light_inception_v1.onnx"}


def space(inst: LayoutInstance) -> int:
    return math.prod(len(t.domain) for t in inst.tensors)


def solve_row(inst: LayoutInstance, time_limit: float, workers: int, loaded=None) -> dict:
    """One instance with local, greedy, exact (and exhaustive where it is small enough); with ``loaded``
    (the model) the best plan also runs under ``--verify`` (:func:`onnxpart.tile.onnx.verify.verify_plan`)."""
    sol = solve(inst, LayoutOptions(("local", "greedy", "exact"), time_limit, workers))
    methods = {r.method: {"cost": r.value, "seconds": r.seconds, "status": r.status} for r in sol.results}
    size = space(inst)
    if size <= EXHAUSTIVE_LIMIT:
        start = time.perf_counter()
        found = brute_force(inst)
        methods["exhaustive"] = {"cost": found[0] if found else None, "seconds": time.perf_counter() - start,
                                 "status": "optimal"}
    else:
        methods["exhaustive"] = {"cost": None, "seconds": None, "status": "refused", "space": size}
    bound = sol.best_lower_bound
    exact = methods["exact"]["cost"]
    gap = None if bound is None or exact is None else max(exact - bound, 0.0) / exact if exact else 0.0
    return {"tensors": len(inst.tensors), "ops": len(inst.ops), "methods": methods, "bound": bound, "gap": gap,
            "one_device": inst.one_device, "best": sol.cost, "replicated": sol.replicated,
            "memory_used": inst.memory_per_device(sol.plan.layouts), "min_memory": inst.min_memory(),
            "verify": None if loaded is None else verify_row(inst, sol.plan, loaded)}


def verify_row(inst: LayoutInstance, plan, loaded) -> dict:
    from onnxpart.tile.onnx.verify import verify_plan

    start = time.perf_counter()
    try:
        report = verify_plan(inst, plan, loaded.graph, loaded.model)
        return {"ok": report.ok, "seconds": time.perf_counter() - start, "note": ""}
    except VerificationError as exc:
        return {"ok": False, "seconds": time.perf_counter() - start, "note": str(exc)}


def model_rows(name: str, path: Path, meshes, time_limit: float, workers: int, verify: bool = False) -> list[dict]:
    loaded = load_costed(path, cost="analytic", device="a100")
    graph, constants = loaded.graph, small_constants(loaded.model.model)
    check = loaded if verify else None
    rows = []
    for shape in meshes:
        free = build_layout_instance(graph, shape, constants=constants)
        row = solve_row(free, time_limit, workers, check)
        row.update(model=name, mesh="x".join(map(str, shape)), memory=None)
        rows.append(row)
        print(progress(row), flush=True)
        if row["memory_used"] <= row["min_memory"] * (1 + 1e-9):
            rows.append(dict(model=name, mesh=row["mesh"], memory="cannot bind", tensors=row["tensors"],
                             ops=row["ops"], methods=None))
            continue
        memory = (row["min_memory"] + row["memory_used"]) / 2
        bound = solve_row(build_layout_instance(graph, shape, memory=memory, constants=constants), time_limit,
                          workers, check)
        bound.update(model=name, mesh=row["mesh"], memory=memory)
        rows.append(bound)
        print(progress(bound), flush=True)
    return rows


def progress(row: dict) -> str:
    parts = [f"{m}={v['cost'] and v['cost'] * 1e6:.6g}µs/{v['seconds'] or 0:.2f}s/{v['status']}"
             if v["cost"] is not None else f"{m}={v['status']}" for m, v in row["methods"].items()]
    return f"{row['model']} mesh {row['mesh']} memory {row['memory']}: " + ", ".join(parts)


def run(quick: bool, time_limit: float, workers: int, verify: bool = False) -> list[dict]:
    meshes = ((4,), (2, 4)) if quick else MESHES
    with tempfile.TemporaryDirectory(prefix="bench_tile_onnx_") as tmp:
        rows = []
        for name, path in build_models(Path(tmp), quick).items():
            rows += model_rows(name, path, meshes, time_limit, workers, verify)
    return rows


def _us(entry: dict | None) -> str:
    if entry is None:
        return "–"
    if entry["status"] == "refused":
        return f"refused (10^{math.log10(entry['space']):.0f} layouts)"
    return "–" if entry["cost"] is None else f"{entry['cost'] * 1e6:.2f}"


def _s(entry: dict | None) -> str:
    return "–" if entry is None or entry["seconds"] is None else f"{entry['seconds']:.2f}"


def _memory(row: dict) -> str:
    from onnxpart.units import format_bytes

    return "none" if row["memory"] is None else row["memory"] if isinstance(row["memory"], str) \
        else format_bytes(row["memory"])


def table(rows: list[dict]) -> list[str]:
    lines = ["| model | mesh | --device-memory | tensors | ops | one device µs | local µs | greedy µs | exhaustive µs | "
             "exact µs | exact status | gap | speed-up | t local s | t greedy s | t exhaustive s | t exact s |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        head = f"| {r['model']} | {r['mesh']} | {_memory(r)} | {r['tensors']} | {r['ops']} |"
        if r["methods"] is None:
            lines.append(head + " the unbounded plan already uses the least memory: no bound can bind |" + " |" * 11)
            continue
        m = r["methods"]
        gap = "–" if r["gap"] is None else f"{r['gap']:.2%}"
        speed = "replicated (×1.00)" if r["replicated"] else f"×{r['one_device'] / r['best']:.2f}"
        lines.append(head + f" {r['one_device'] * 1e6:.2f} | {_us(m['local'])} | {_us(m['greedy'])} | "
                     f"{_us(m['exhaustive'])} | {_us(m['exact'])} | {m['exact']['status']} | {gap} | {speed} | "
                     f"{_s(m['local'])} | {_s(m['greedy'])} | {_s(m['exhaustive'])} | {_s(m['exact'])} |")
    return lines


def verdicts(rows: list[dict]) -> list[tuple[str, bool, str]]:
    solved = [r for r in rows if r["methods"] is not None]
    out = []
    for label, one_d, limit in (("1-D meshes", True, TARGET_1D_S), ("2x4", False, TARGET_2D_S)):
        big = [r for r in solved if r["tensors"] >= TARGET_TENSORS and ("x" not in r["mesh"]) == one_d]
        bad = [f"{r['model']}@{r['mesh']}{'' if r['memory'] is None else '+mem'} "
               f"({r['methods']['exact']['status']}, {r['methods']['exact']['seconds']:.1f} s)" for r in big
               if r["methods"]["exact"]["status"] != "optimal" or r["methods"]["exact"]["seconds"] >= limit]
        worst = max((r["methods"]["exact"]["seconds"] for r in big), default=0.0)
        out.append((f"exact proves optimality on every model with ≥ {TARGET_TENSORS} tensors in < {limit:g} s on "
                    f"{label}", bool(big) and not bad,
                    f"{len(big) - len(bad)}/{len(big)} rows; slowest {worst:.2f} s" + (f"; not: {', '.join(bad)}"
                                                                                      if bad else "")))
    for better, worse in (("exact", "greedy"), ("greedy", "local")):
        off = [f"{r['model']}@{r['mesh']}" for r in solved if r["methods"][better]["cost"] is None
               or r["methods"][worse]["cost"] is not None
               and r["methods"][better]["cost"] > r["methods"][worse]["cost"] * (1 + 1e-9)]
        out.append((f"{better} never worse than {worse}", not off,
                    f"{len(solved) - len(off)}/{len(solved)} rows" + (f"; worse: {', '.join(off)}" if off else "")))
    checked = [r for r in solved if r.get("verify") is not None]
    failed = [f"{r['model']}@{r['mesh']}: {r['verify']['note'][:120]}" for r in checked if not r["verify"]["ok"]]
    if not checked:
        out.append(("every plan passes --verify", False, "not evaluated: run with --onnx-verify"))
    else:
        slowest = max(r["verify"]["seconds"] for r in checked)
        out.append(("every plan passes --verify", len(checked) == len(solved) and not failed,
                    f"{len(checked) - len(failed)}/{len(solved)} rows' best plans verified (slowest {slowest:.0f} s)"
                    + (f"; failed: {'; '.join(failed)}" if failed else "")))
    return out


def markdown(rows: list[dict], command: str, seconds: float, machine: str, time_limit: float, quick: bool) -> str:
    lines = ["## Tiling: ONNX models on device meshes", "",
             f"Machine: {machine}, shared with other sessions (load average {os.getloadavg()[1]:.1f} at the end: "
             f"times are under that load). Command: `{command}` "
             f"({seconds:.0f} s in all)"
             + (" — a **quick** run: BERT with 4 layers, meshes 4 and 2x4 only" if quick else "") + ". "
             "Per row one `onnxpart.tile.onnx.solve` with local, greedy and exact (bucket elimination over step time and "
             "bytes per device with Lagrangian pruning; CP-SAT, warm-started, where it does not finish) "
             f"sharing {time_limit:g} s; step times in µs (analytic costs on an A100, its interconnect on "
             "every mesh axis: launch overhead on every device, shard rooflines, reshardings by the index sets "
             "they move, final gathers of the outputs); `speed-up` is the one-device time over the plan's, "
             "`replicated` where no sharding beats one device; exhaustive enumerates up to "
             f"{EXHAUSTIVE_LIMIT:,} layouts. A bounded row's `--device-memory` lies halfway between the least "
             "memory any layout needs and what the unbounded best plan uses.", ""]
    lines += table(rows)
    lines += ["", "| target | verdict | detail |", "|---|---|---|"]
    lines += [f"| {t} | {'MET' if ok else '**NOT MET**'} | {d} |" for t, ok, d in verdicts(rows)]
    return "\n".join(lines)
