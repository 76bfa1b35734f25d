"""Benchmark `onnxpart remat` and write the tables into BENCHMARKS.md (section "remat").

Instances: the Moccasin paper's graphs (../shared/benchmarks/moccasin-graphs, read in place), random
layered graphs from scripts/gen_layered_graphs.py, the transformer fixture and light models of the onnx
wheel. Budgets 90% and 80% of the input order's peak (floor, the paper's rule). Every method gets the same
time limit on the same instance; the lower bound is each solver's proven bound.

    python scripts/bench_remat.py            # the default subset (about 40 minutes on 2 cores; G4 at 90% only)
    python scripts/bench_remat.py --full     # adds G3, G4 and ResNet50 with the baselines
    python scripts/bench_remat.py --fresh "G2|0.8" --fresh "ResNet50"   # re-measure cached rows by key prefix

Rows are cached in .venv/bench_remat.json; the section says which rows this run measured.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ROOT, SHARED, machine_line, write_section  # noqa: E402
from gen_layered_graphs import layered_graph  # noqa: E402

from onnxpart.errors import InfeasibleError  # noqa: E402
from onnxpart.remat import Options, solve, tdi_of  # noqa: E402
from onnxpart.remat.model import build_instance  # noqa: E402
from onnxpart.readers import read_graph, read_node_link  # noqa: E402

GRAPHS = SHARED / "benchmarks" / "moccasin-graphs"
KNOWN = {("G1", 0.9): 0.79, ("G1", 0.8): 2.30, ("fcn_8_vgg train", 0.9): 0.03, ("fcn_8_vgg train", 0.8): 0.14}
FILES = {
    "G1": "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json",
    "G2": "random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json",
    "G3": "random_layered_n500_w0.36_nlv0.75_ed0.2_scd0.14.json",
    "G4": "random_layered_n1000_w0.31_nlv0.75_ed0.2_scd0.14.json",
    "fcn_8_vgg train": "fcn_8_vgg (MLSys)_32_(416, 608, 3)_train_nx.json",
    "ResNet50 train": "ResNet50 (MLSys)_256_(224, 224, 3)_train_nx.json",
}


def run(graph, fraction: float, method: str, time_limit: float, order: str = "fixed",
        order_time_limit: float = 10.0) -> dict:
    """One method on ``graph``; ``time_limit`` is the whole run (``--order minmem``'s search included)."""
    options = Options(budget=("fraction", fraction), methods=(method,), order=order, time_limit=time_limit,
                      order_time_limit=order_time_limit)
    start = time.perf_counter()
    try:
        solution = solve(build_instance(graph), options)
    except InfeasibleError as exc:
        partial = getattr(exc, "solution", None)
        row = {"method": method, "status": "no solution", "feasible": False, "seconds": time.perf_counter() - start}
        if partial is not None and partial.results:
            r = partial.results[0]
            row.update(status=r.status, peak=r.profile.peak if r.profile else None,
                       tdi=r.profile.tdi if r.profile else None, seconds=r.seconds, budget=partial.budget)
        return row
    o = solution.results[0]
    if o.profile is None:  # the method found nothing; the greedy's first answer stood in for the command
        return {"method": method, "status": o.status, "feasible": False, "seconds": o.seconds,
                "total": time.perf_counter() - start}
    either = [b.value for b in solution.lower_bounds if b.method == "either-order"]
    return {"method": method, "status": o.status, "feasible": True, "budget": solution.budget,
            "baseline": solution.baseline.peak, "peak": o.profile.peak, "tdi": o.profile.tdi,
            "tdi_lb": tdi_of(solution.instance, o.best_bound),
            "tdi_lb_either_order": tdi_of(solution.instance, either[0]) if either else None,
            "order": solution.options.order, "tried": solution.tried,
            "time_to_best": o.time_to_best, "seconds": o.seconds,
            "recomputed": o.profile.recomputations, "start_peak": solution.start.peak,
            "total": time.perf_counter() - start}


def paper_cases(full: bool) -> list[tuple[str, object, list[tuple[str, float]]]]:
    both = [("moccasin", 60), ("checkmate", 150), ("checkmate-lp", 150), ("greedy", 60)]
    cases = [("G1", both), ("fcn_8_vgg train", both), ("G2", both)]
    if full:
        cases += [("ResNet50 train", both), ("G3", [("moccasin", 120), ("greedy", 120)]),
                  ("G4", [("moccasin", 600), ("greedy", 600)])]
    else:
        cases += [("ResNet50 train", [("moccasin", 60), ("greedy", 60)]), ("G4", [("moccasin", 600), ("greedy", 600)])]
    fractions = {"G4": (0.9,)} if not full else {}
    return [(name, read_graph(GRAPHS / FILES[name]), methods, fractions.get(name, (0.9, 0.8)))
            for name, methods in cases]


def fmt_pct(value) -> str:
    return "—" if value is None else f"{100 * value:+.2f}%"


def fmt_int(value) -> str:
    return "—" if value is None else f"{value:,.0f}"


def fmt_s(value) -> str:
    return "—" if value is None else f"{value:.1f}"


#: a run of --time-limit T counts as within T up to this factor: the solvers stop on their own clock, and
#: reading the graph and building the instance come before it
LIMIT_SLACK = 1.02


def targets(results: dict, measured: list[str]) -> str:
    """The issue's targets, each judged from the rows above (``met`` / **not met**), with the evidence."""
    def row(key: str) -> dict:
        return results.get(key) or {"feasible": False, "status": "not run"}

    def mark(ok: bool) -> str:
        return "met" if ok else "**not met**"

    def when(key: str) -> str:
        return "" if key in measured else " (cached row)"

    parts = []
    for fraction in (0.9, 0.8):  # the known G1 optima in ≤ 20 s
        key, known = f"G1|{fraction}|moccasin|60", KNOWN[("G1", fraction)]
        r = row(key)
        ok = r["feasible"] and abs(100 * r["tdi"] - known) < 0.005 and r["time_to_best"] <= 20
        parts.append(f"G1 {int(100 * fraction)}% optimum (+{known:.2f}%) in ≤ 20 s — {mark(ok)}: "
                     f"{fmt_pct(r.get('tdi'))} at {fmt_s(r.get('time_to_best'))} s{when(key)}")
    for fraction, goal in ((0.9, 0.01), (0.8, 0.05)):  # G2 within 60 s
        key = f"G2|{fraction}|moccasin|60"
        r = row(key)
        ok = r["feasible"] and r["tdi"] <= goal + 1e-12 and r["time_to_best"] <= 60
        text = (f"G2 {int(100 * fraction)}% TDI ≤ {100 * goal:.0f}% in 60 s — {mark(ok)} with `--order fixed`"
                f": {fmt_pct(r.get('tdi'))} at {fmt_s(r.get('time_to_best'))} s, proven ≥ "
                f"{fmt_pct(r.get('tdi_lb'))}{when(key)}")
        best_key = f"G2|{fraction}|moccasin-best|60"
        best = row(best_key)
        if best["feasible"]:
            best_ok = best["tdi"] <= goal + 1e-12 and best["total"] <= 60 * LIMIT_SLACK
            text += (f"; {mark(best_ok)} with the default `--order best`: {fmt_pct(best.get('tdi'))} in "
                     f"{fmt_s(best.get('total'))} s in all{when(best_key)}")
        parts.append(text)
    g4 = [(m, row(f"G4|0.9|{m}|600")) for m in ("moccasin", "greedy")]
    g4_ok = [(m, r) for m, r in g4 if r["feasible"] and r["tdi"] <= 0.05 and r["seconds"] <= 600]
    parts.append("n = 1000 (G4 90%) feasible at TDI ≤ 5% in 10 min — " + mark(bool(g4_ok)) + ": "
                 + ", ".join(f"{m} {fmt_pct(r.get('tdi')) if r['feasible'] else r['status']} in "
                             f"{fmt_s(r.get('seconds'))} s{when(f'G4|0.9|{m}|600')}" for m, r in g4))
    speed = []  # ≥ 10× faster than our Checkmate MILP to the same objective, n ≤ 250
    for name in ("G1", "fcn_8_vgg train", "G2"):
        for fraction in (0.9, 0.8):
            mo, cm = row(f"{name}|{fraction}|moccasin|60"), row(f"{name}|{fraction}|checkmate|150")
            if not mo["feasible"]:
                continue
            if cm["feasible"] and cm["tdi"] <= mo["tdi"] + 5e-5 and cm.get("time_to_best") is None:
                speed.append((False, f"{name} {int(100 * fraction)}% (checkmate reached it; HiGHS reported no "
                                     "improving-solution event, so its time to best is unknown)"))
            elif cm["feasible"] and cm["tdi"] <= mo["tdi"] + 5e-5:  # equal as printed (durations are floored)
                ratio = cm["time_to_best"] / max(mo["time_to_best"], 0.1)
                speed.append((ratio >= 10, f"{name} {int(100 * fraction)}% {ratio:.0f}×"))
            else:
                speed.append((True, f"{name} {int(100 * fraction)}% (checkmate never reached it in 150 s)"))
    parts.append(f"≥ 10× faster than our Checkmate MILP to the same objective (n ≤ 250) — "
                 f"{mark(all(ok for ok, _ in speed))}: " + ", ".join(text for _, text in speed)
                 + " (time to best, 0.1 s floor)")
    missing = [k for k, r in results.items() if k.endswith(("|moccasin|60", "|moccasin|600"))
               and r.get("feasible") and r.get("tdi_lb") is None]
    trivial = [k.rsplit("|", 2)[0] for k, r in results.items() if k.endswith(("|moccasin|60", "|moccasin|600"))
               and r.get("feasible") and r.get("tdi_lb") is not None and r["tdi_lb"] <= 0 < r["tdi"]]
    parts.append("a proven lower bound beside every moccasin result — "
                 + mark(not missing) + (f": none for {', '.join(missing)}" if missing else "")
                 + (f" (only the trivial +0.00% for {', '.join(trivial)})" if trivial else ""))
    return ("Targets (issue 4), judged by the script from the rows above: " + "; ".join(parts) + ".\n\n"
            + issue43_targets(row, mark, when))


def issue43_targets(row, mark, when) -> str:
    """Issue 43: G2 at 80 % closed (TDI ≤ +3 % or a proven bound ≥ +4.5 %) in 60 s, and the default's
    ResNet50 and G4 rows no worse than the fixed order's (TDI, and the bound over what the answer covers)."""
    key = "G2|0.8|moccasin-best|60"
    g2 = row(key)
    lb = g2.get("tdi_lb_either_order")
    ok = g2["feasible"] and g2["total"] <= 60 * LIMIT_SLACK and (g2["tdi"] <= 0.03 + 1e-12 or (lb or 0) >= 0.045)
    parts = [f"G2 80% TDI ≤ +3% or proven ≥ +4.5% in 60 s — {mark(ok)}: {fmt_pct(g2.get('tdi'))} "
             f"(order {g2.get('order')}), proven ≥ {fmt_pct(lb)} over either order, {fmt_s(g2.get('total'))} s in all"
             f"{when(key)}"]
    for name, fraction, limit in (("ResNet50 train", 0.9, 60), ("ResNet50 train", 0.8, 60), ("G4", 0.9, 600)):
        best, fixed = row(f"{name}|{fraction}|moccasin-best|{limit}"), row(f"{name}|{fraction}|moccasin|{limit}")
        ok = best["feasible"] and fixed["feasible"] and best["tdi"] <= fixed["tdi"] + 5e-5
        parts.append(f"{name} {int(100 * fraction)}% no worse than the fixed order — {mark(ok)}: "
                     f"{fmt_pct(best.get('tdi'))} against {fmt_pct(fixed.get('tdi'))}")
    return "Targets (issue 43), judged by the script from the rows above: " + "; ".join(parts) + "."


BEST_CASES = (("G1", 60, (0.9, 0.8)), ("G2", 60, (0.9, 0.8)), ("ResNet50 train", 60, (0.9, 0.8)),
              ("G4", 600, (0.9,)))


def best_order_table(record) -> list[str]:
    """The default, ``--order best``: moccasin in the file's order and in the memory-minimizing one, each
    with half of what the order search leaves of the time limit; the shorter sequence answers."""
    lines = ["", "### Paper graphs with the default `--order best` (moccasin; the file's and the memory-minimizing "
             "order, each with half of what the order search leaves)", "",
             "The memory-minimizing order (up to 10 s of CP-SAT) is another restriction than the paper's: the stages "
             "of an order with a lower peak. *proven ≥ (either order)* bounds every sequence whose first "
             "computations follow the file's order or the memory-minimizing one; each order's own bound holds "
             "in its stages only. The paper's Table 2 setting is the fixed-order table above.", "",
             "| graph | budget | answer | TDI | proven ≥ (either order) | file order: TDI, proven ≥ | "
             "minmem order: own peak, TDI, proven ≥ | total (s) |", "|---|---|---|---|---|---|---|---|"]
    for name, limit, fractions in BEST_CASES:
        graph = read_graph(GRAPHS / FILES[name])
        for fraction in fractions:
            row = record(f"{name}|{fraction}|moccasin-best|{limit}",
                         lambda: run(graph, fraction, "moccasin", limit, "best", 10))
            tried = {t["order"]: t for t in row.get("tried") or []}
            fixed, minmem = tried.get("fixed"), tried.get("minmem")
            lines.append(
                f"| {name} | {int(fraction * 100)}% = {fmt_int(row.get('budget'))} | {row.get('order', '—')} "
                f"| {fmt_pct(row.get('tdi')) if row['feasible'] else row['status']} "
                f"| {fmt_pct(row.get('tdi_lb_either_order') if minmem else row.get('tdi_lb'))} "
                f"| {_order_cell(fixed)} | "
                + (f"{fmt_int(minmem['input_order_peak_bytes'])}, {_order_cell(minmem)}" if minmem else
                   "not run: the file's order " + ("fits" if fixed and fixed["tdi"] == 0 else "is memory-minimal"))
                + f" | {fmt_s(row.get('total'))} |")
    return lines


def _order_cell(tried: dict | None) -> str:
    return "—" if tried is None else f"{fmt_pct(tried['tdi'])}, ≥ {fmt_pct(tried['tdi_lower_bound'])}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / ".venv" / "bench_remat.json")
    parser.add_argument("--fresh", action="append", default=[], help="re-measure cached rows whose key starts so")
    args = parser.parse_args()
    results: dict = json.loads(args.out.read_text()) if args.out.exists() else {}
    concurrent = subprocess.run(["pgrep", "-f", "bench_partition"], capture_output=True).returncode == 0
    measured: list[str] = []

    def record(key: str, compute) -> dict:
        if key not in results or any(key.startswith(prefix) for prefix in args.fresh):
            measured.append(key)
            print(f"… {key}", flush=True)
            results[key] = {**compute(), "measured_on": time.strftime("%Y-%m-%d")}
            args.out.write_text(json.dumps(results, indent=1))
        print(f"{key}: {results[key]}", flush=True)
        return results[key]

    lines = [f"Measured by `scripts/bench_remat.py` on {machine_line()}. TDI = total duration increase over "
             "computing every op once; *proven ≥* is the best proven bound under the same restriction "
             "(moccasin: the largest of CP-SAT's bound under input-order stages and C_v = 2, the event-cover "
             "bound and the Checkmate LP relaxation of the same stages, solved beside CP-SAT when it gets the CPU "
             "in time; checkmate: input-order stages); time = seconds to the "
             "best solution (HiGHS: to its last improving solution), same time limit per method and "
             "instance. Budgets are floor(fraction × the input order's peak), the paper's rule. "
             "*greedy* is the eviction heuristic (no bound); moccasin starts from it when it fits the budget."
             + (" Another benchmark (bench_partition) was running on the same cores at the start of this run."
                if concurrent else ""),
             "", "MEASURED", ""]
    lines += ["### Paper graphs (Table 2 layout)", "",
              "| graph (n, m) | budget | method | TDI | proven ≥ | peak | recomputed | time to best (s) | "
              "total (s) | known optimum |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, graph, methods, fractions in paper_cases(args.full):
        m = sum(1 for _ in graph.edges())
        for fraction in fractions:
            for method, limit in methods:
                row = record(f"{name}|{fraction}|{method}|{limit}", lambda: run(graph, fraction, method, limit))
                known = KNOWN.get((name, fraction))
                lines.append(f"| {name} ({len(graph.ops)}, {m}) | {int(fraction * 100)}% = {fmt_int(row.get('budget'))} "
                             f"| {method} | {fmt_pct(row.get('tdi')) if row['feasible'] else row['status']} "
                             f"| {fmt_pct(row.get('tdi_lb'))} | {fmt_int(row.get('peak'))} "
                             f"| {row.get('recomputed', '—')} | {fmt_s(row.get('time_to_best'))} "
                             f"| {fmt_s(row.get('seconds'))} | {'+%.2f%%' % known if known else ''} |")
    lines += best_order_table(record)
    lines += ["", "### Random layered graphs (scripts/gen_layered_graphs.py, moccasin, 60 s)", "",
              "| graph | n | m | budget | TDI | proven ≥ | time to best (s) | total (s) |", "|---|---|---|---|---|---|---|---|"]
    for n, width, seed in ((100, 0.3, 1), (250, 0.35, 3)):
        graph = read_node_link(layered_graph(n, width, seed))
        for fraction in (0.9, 0.8):
            row = record(f"layered{n}-{width}-{seed}|{fraction}", lambda: run(graph, fraction, "moccasin", 60))
            lines.append(f"| layered w={width} seed={seed} | {n} | {sum(1 for _ in graph.edges())} | {int(fraction * 100)}% "
                         f"| {fmt_pct(row.get('tdi')) if row['feasible'] else row['status']} | {fmt_pct(row.get('tdi_lb'))} "
                         f"| {fmt_s(row.get('time_to_best'))} | {fmt_s(row.get('seconds'))} |")
    lines += ["", "### ONNX models (analytic a100 costs; moccasin 60 s)", "",
              "| model | ops | order | budget | baseline peak | peak | TDI | proven ≥ | total (s) |",
              "|---|---|---|---|---|---|---|---|---|"]
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    for label, path, fraction, order in (("transformer_block", ROOT / "fixtures" / "transformer_block.onnx", 0.95, "fixed"),
                                         ("light_shufflenet", light / "light_shufflenet.onnx", 0.95, "minmem"),
                                         ("light_densenet121", light / "light_densenet121.onnx", 0.9, "fixed")):
        graph = read_graph(path)
        row = record(f"{label}|{fraction}|{order}", lambda: run(graph, fraction, "moccasin", 60, order))
        lines.append(f"| {label} | {len(graph.ops)} | {order} | {int(fraction * 100)}% | {fmt_int(row.get('baseline'))} "
                     f"| {fmt_int(row.get('peak'))} | {fmt_pct(row.get('tdi')) if row['feasible'] else row['status']} "
                     f"| {fmt_pct(row.get('tdi_lb'))} | {fmt_s(row.get('seconds'))} |")
    lines += ["", targets(results, measured)]
    days = sorted({row.get("measured_on", "an undated run") for row in results.values()})
    lines[lines.index("MEASURED")] = (
        f"Command: `python scripts/bench_remat.py {' '.join(sys.argv[1:])}`. Rows measured by this run: "
        f"{', '.join(measured) or 'none'}; every other row is cached from an earlier run of the script "
        f"(.venv/bench_remat.json), measured on {', '.join(days)}.")
    write_section("remat", "\n".join(lines))
    print("wrote the remat section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
