"""Tiling (``onnxpart tile``): the paper's Table 1 programs, random CHLP instances, random programs.

Writes the ``tile`` section of BENCHMARKS.md. Run: ``.venv/bin/python scripts/bench_tile.py``
(``--quick`` for a smoke run, ``--no-write`` to leave BENCHMARKS.md alone, ``--json PATH`` for the rows).
``--onnx`` also runs the ONNX models on device meshes (:mod:`bench_tile_onnx`, the ``tile-onnx``
section); ``--onnx-only`` runs just those.

Rows:

* the five Section 6 programs (:func:`onnxpart.tile.program.programs.paper_program`, matrices 1x1 so the cost
  counts retiled matrices as in the paper's Fig. 6), with one implementation per op (the paper's
  setting) and with every implementation: cost and time of local / greedy / exhaustive / exact;
* random CHLP instances (H_{m,n,k}, L_{tau,s}) of Section 4 (:func:`onnxpart.tile.program.model.random_chlp`)
  at growing n, several seeds: greedy vs exact (CP-SAT, warm-started from greedy);
* random matrix programs (:func:`onnxpart.tile.program.model.random_program`) at a few sizes.

Then the paper's anchors and our targets, judged from the rows.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's onnxpart, not an installed copy
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine_line, write_section  # noqa: E402

from onnxpart.tile.program import ProgramOptions, ProgramSolution, solve  # noqa: E402
from onnxpart.tile.program.exact import EXHAUSTIVE_LIMIT  # noqa: E402
from onnxpart.tile.program.model import Instance, build_instance, random_chlp, random_program  # noqa: E402
from onnxpart.tile.program.programs import PAPER_PROGRAMS, paper_program  # noqa: E402

#: The paper's Table 1 (seconds): local, exhaustive search, greedy.
PAPER_TABLE1 = {
    "linear-regression": (0.0012, 0.3443, 0.019366),
    "pca": (0.0020, 605.7924, 0.042917),
    "power-set": (0.0042, 1275.4500, 0.042180),
    "random-1": (0.0041, 1.0372, 0.029209),
    "random-2": (0.0014, 0.0517, 0.023032),
}
#: CP-SAT's threads on the program rows.
WORKERS = 2
GREEDY_TOL = 1e-3  # greedy within 0.1% of exact
GREEDY_MS = 50.0
EXACT_PAPER_S = 1.0


def chlp_instance(n: int, k: int, s: int, tau: int, density: float, seed: int) -> Instance:
    """A random CHLP instance with m = density * n edges (capped at C(n, k))."""
    import math
    return random_chlp(n, min(int(round(density * n)), math.comb(n, k)), k, s, tau, seed)


def run(instance: Instance, methods: tuple[str, ...], time_limit: float, repeats: int = 1) -> dict:
    """Solve with ``methods`` (tree off, so each method is timed on its own); per-method median time."""
    options = ProgramOptions(methods=methods, tree="off", time_limit=time_limit, workers=WORKERS)
    error = None
    try:
        solutions: list[ProgramSolution] = [solve(instance, options) for _ in range(repeats)]
    except AssertionError as exc:  # an internal check of a method failed: record it, keep the others' rows
        error = f"{type(exc).__name__}: {exc}"
        rest = tuple(m for m in methods if m != "exact")
        solutions = [solve(instance, ProgramOptions(methods=rest, tree="off", time_limit=time_limit, workers=WORKERS))]
    first = solutions[0]
    row: dict = {"instance": instance.name, "n": instance.n, "m": instance.m,
                 "space": instance.space_size(), "methods": {}}
    for i, r in enumerate(first.results):
        seconds = statistics.median(s.results[i].seconds for s in solutions)
        entry = {"cost": r.value, "seconds": seconds, "status": r.status}
        if r.status == "refused":
            found = re.search(r"([\d,]+) labelings", r.note)
            entry["refused_size"] = int(found.group(1).replace(",", "")) if found else None
        row["methods"][r.method] = entry
    if error is not None:
        row["methods"]["exact"] = {"cost": None, "seconds": None, "status": "error", "note": error}
        print(f"  {instance.name}: exact failed: {error}", flush=True)
    exact_bounds = [b.value for b in first.lower_bounds if b.solver == "cp-sat" and b.value is not None]
    row["exact_bound"] = max(exact_bounds) if exact_bounds else None
    row["best_bound"] = first.best_lower_bound
    row["best_cost"] = first.cost
    return row


def gap(cost: int | None, bound: float | None) -> float | None:
    if cost is None or bound is None:
        return None
    if cost <= bound + 1e-9:
        return 0.0
    return (cost - bound) / cost if cost else None


def fmt_cost(entry: dict | None) -> str:
    if entry is None:
        return "–"
    if entry["status"] == "refused":
        size = entry.get("refused_size")
        return f"refused (size {size:,})" if size else "refused"
    return "–" if entry["cost"] is None else str(entry["cost"])


def fmt_time(entry: dict | None) -> str:
    if entry is None or entry["seconds"] is None or entry["status"] == "refused":
        return "–"
    s = entry["seconds"]
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def fmt_exact_status(row: dict) -> str:
    e = row["methods"].get("exact")
    if e is None:
        return "–"
    g = gap(e["cost"], row["exact_bound"])
    if e["status"] == "optimal":
        return "optimal"
    if e["status"] == "error":
        return f"**error**: {e['note']}"
    bound = row["exact_bound"]
    return f"{e['status']} (bound {bound:g}, gap {g:.0%})" if g is not None else f"{e['status']} (no bound)"


def progress(row: dict) -> str:
    return ", ".join(f"{m}={v['cost']} {v['seconds'] or 0:.4f}s {v['status']}" for m, v in row["methods"].items())


def paper_rows(time_limit: float, repeats: int) -> list[dict]:
    rows = []
    for impl in ("one", "all"):
        for name in PAPER_PROGRAMS:
            instance = build_instance(paper_program(name, 1, impl))
            row = run(instance, ("local", "greedy", "exhaustive", "exact"), time_limit, repeats)
            row.update(program=name, implementations=impl)
            rows.append(row)
            print(f"paper {impl} {name}: " + progress(row), flush=True)
    return rows


def chlp_rows(sizes: list[int], seeds: list[int], k: int, s: int, tau: int, density: float,
              time_limit: float) -> list[dict]:
    rows = []
    for n in sizes:
        for seed in seeds:
            row = run(chlp_instance(n, k, s, tau, density, seed), ("local", "greedy", "exact"), time_limit)
            row.update(family="chlp", size=n, seed=seed)
            rows.append(row)
            print(f"chlp n={n} seed={seed}: " + progress(row), flush=True)
    return rows


def program_rows(sizes: list[tuple[int, int]], seeds: list[int], time_limit: float) -> list[dict]:
    rows = []
    for n_inputs, n_exprs in sizes:
        for seed in seeds:
            row = run(random_program(n_inputs, n_exprs, seed=seed), ("local", "greedy", "exact"), time_limit)
            row.update(family="program", inputs=n_inputs, exprs=n_exprs, seed=seed)
            rows.append(row)
            print(f"program {n_inputs}x{n_exprs} seed={seed}: " + progress(row), flush=True)
    return rows


def verdicts(paper: list[dict], others: list[dict]) -> list[tuple[str, bool, str]]:
    out = []
    # 1. greedy within 0.1% of exact on the paper programs, each in < 50 ms.
    bad_cost = [f"{r['program']}/{r['implementations']}" for r in paper
                if r["methods"]["exact"]["cost"] is None
                or r["methods"]["greedy"]["cost"] > r["methods"]["exact"]["cost"] * (1 + GREEDY_TOL)]
    slow = [f"{r['program']}/{r['implementations']}" for r in paper
            if r["methods"]["greedy"]["seconds"] * 1e3 >= GREEDY_MS]
    worst = max(r["methods"]["greedy"]["seconds"] for r in paper) * 1e3
    out.append((f"greedy within 0.1% of exact on the {len(paper)} paper-program rows, each < {GREEDY_MS:g} ms",
                not bad_cost and not slow,
                f"cost off on {len(bad_cost)} ({', '.join(bad_cost) or 'none'}); "
                f"slowest greedy {worst:.1f} ms ({len(slow)} over)"))
    # 2. exact proves the optimum of the paper programs in < 1 s.
    unproven = [f"{r['program']}/{r['implementations']}" for r in paper
                if r["methods"]["exact"]["status"] != "optimal" or r["methods"]["exact"]["seconds"] >= EXACT_PAPER_S]
    worst = max(r["methods"]["exact"]["seconds"] or 0.0 for r in paper)
    out.append((f"exact proves the paper programs' optimum in < {EXACT_PAPER_S:g} s",
                not unproven, f"{len(paper) - len(unproven)}/{len(paper)} proven in time; slowest {worst * 1e3:.1f} ms"
                + (f"; not: {', '.join(unproven)}" if unproven else "")))
    rows = paper + others
    # 3. exact never worse than greedy.
    errors = [r["instance"] for r in rows if r["methods"]["exact"]["cost"] is None]
    worse = [r["instance"] for r in rows if r["methods"]["exact"]["cost"] is not None
             and r["methods"]["exact"]["cost"] > r["methods"]["greedy"]["cost"]]
    out.append(("exact never worse than greedy (all rows)", not worse and not errors,
                f"{len(rows) - len(worse) - len(errors)}/{len(rows)} rows"
                + (f"; worse: {', '.join(worse)}" if worse else "")
                + (f"; exact gave no tiling (error) on {len(errors)}: {', '.join(errors)}" if errors else "")))
    # 4. greedy never worse than local.
    worse = [r["instance"] for r in rows if r["methods"]["greedy"]["cost"] > r["methods"]["local"]["cost"]]
    out.append(("greedy never worse than local (all rows)", not worse,
                f"{len(rows) - len(worse)}/{len(rows)} rows" + (f"; worse on {len(worse)}: {', '.join(worse)}"
                                                               if worse else "")))
    return out


def markdown(paper: list[dict], chlp: list[dict], programs: list[dict], args, command: str,
             seconds: float) -> str:
    lines = [
        "## Tiling: matrix-tiling programs (CHLP)",
        "",
        f"Machine: {machine_line()}. Command: `{command}` ({seconds:.0f} s in all). "
        f"Exact = CP-SAT warm-started from greedy, {args.time_limit:g} s per solve, {WORKERS} workers; exhaustive "
        f"limit {EXHAUSTIVE_LIMIT:,} labelings; tree method off so each method is timed alone.",
        "",
        f"### The paper's five programs (Section 6, Table 1), matrices 1x1 (cost = retiled matrices); "
        f"times are the median of {args.repeats} runs",
        "",
        "`one` = one implementation per op (the paper's setting: Cannon for mul, Gauss-Jordan on column tiles "
        "for inv); `all` = every implementation in our catalog. Paper columns: its Table 1 times.",
        "",
        "| program | impl | n | m | local | greedy | exhaustive | exact | exact status | "
        "t local | t greedy | t exhaustive | t exact | paper t local / exh. / greedy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in paper:
        m = r["methods"]
        pl, pe, pg = PAPER_TABLE1[r["program"]]
        lines.append(
            f"| {r['program']} | {r['implementations']} | {r['n']} | {r['m']} | {fmt_cost(m['local'])} | "
            f"{fmt_cost(m['greedy'])} | {fmt_cost(m['exhaustive'])} | {fmt_cost(m['exact'])} | "
            f"{fmt_exact_status(r)} | {fmt_time(m['local'])} | {fmt_time(m['greedy'])} | "
            f"{fmt_time(m['exhaustive'])} | {fmt_time(m['exact'])} | {pl:g} / {pe:g} / {pg:g} s |")
    lines += [
        "",
        f"### Random CHLP instances (Section 4): {args.k}-uniform, m = {args.density:g}·n edges, "
        f"tau = {args.tau} labels, |L(e)| = s = {args.s}, unit weights",
        "",
        "| n | m | seed | local | greedy | exact | exact status | greedy vs exact | t local | t greedy | t exact |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in chlp:
        m = r["methods"]
        g, e = m["greedy"]["cost"], m["exact"]["cost"]
        ratio = "–" if e is None else "=" if g == e else (f"+{(g - e) / e:.1%}" if e else f"+{g - e}")
        lines.append(f"| {r['n']} | {r['m']} | {r['seed']} | {m['local']['cost']} | {g} | {fmt_cost(m['exact'])} | "
                     f"{fmt_exact_status(r)} | {ratio} | {fmt_time(m['local'])} | {fmt_time(m['greedy'])} | "
                     f"{fmt_time(m['exact'])} |")
    if any(r["methods"]["exact"]["status"] == "error" for r in chlp + programs):
        lines += ["", "`error`: `solve_cpsat_tiling` asserts that the labeling's recomputed cost equals CP-SAT's "
                  "objective; a time-limited incumbent need not be tight in its retiling/algorithm variables, so "
                  "its labels can cost less than the objective and the check raises (a bug in the check; the "
                  "row keeps local and greedy). It depends on where the time limit falls, so which seed hits it varies."]
    lines += [
        "",
        "### Random matrix programs (`random_program`: every catalog op, transposes with p = 0.3, unit sizes)",
        "",
        "| inputs | exprs | n | m | seed | local | greedy | exact | exact status | t local | t greedy | t exact |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in programs:
        m = r["methods"]
        lines.append(f"| {r['inputs']} | {r['exprs']} | {r['n']} | {r['m']} | {r['seed']} | {m['local']['cost']} | "
                     f"{m['greedy']['cost']} | {fmt_cost(m['exact'])} | {fmt_exact_status(r)} | "
                     f"{fmt_time(m['local'])} | {fmt_time(m['greedy'])} | {fmt_time(m['exact'])} |")
    one = [r for r in paper if r["implementations"] == "one"]
    matched = sum(r["methods"]["greedy"]["cost"] == r["best_cost"] and r["best_bound"] is not None
                  and r["best_bound"] >= r["best_cost"] - 1e-9 for r in one)
    refused = sum(r["methods"]["exhaustive"]["status"] == "refused" for r in paper)
    greedy_ms = [r["methods"]["greedy"]["seconds"] * 1e3 for r in paper]
    exh = [r["methods"]["exhaustive"]["seconds"] for r in paper if r["methods"]["exhaustive"]["status"] != "refused"]
    lines += [
        "",
        "### Paper anchors and targets",
        "",
        "Paper (Table 1, Fig. 6; its machine, its programs and cost tables — ours approximate them, see "
        "`onnxpart/tile/program/programs.py`): greedy 0.019–0.043 s per program; exhaustive 0.05–1275 s; greedy "
        "matched exhaustive on 4 of 5 programs and beat local on all.",
        "",
        f"Here: greedy {min(greedy_ms):.1f}–{max(greedy_ms):.1f} ms per program; exhaustive "
        + (f"{min(exh) * 1e3:.1f}–{max(exh) * 1e3:.1f} ms where run" if exh else "never run")
        + f", refused on {refused} of {len(paper)} rows; greedy matched the proven optimum on {matched} of "
        f"{len(one)} programs in the one-implementation setting.",
        "",
        "| target | verdict | detail |",
        "|---|---|---|",
    ]
    for target, ok, detail in verdicts(paper, chlp + programs):
        lines.append(f"| {target} | {'met' if ok else '**not met**'} | {detail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0,
                        help="seconds per solve, every method together (CP-SAT has what the others leave)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one seed, short limit")
    parser.add_argument("--no-write", action="store_true", help="do not write BENCHMARKS.md")
    parser.add_argument("--json", type=Path, help="write every row as JSON here")
    parser.add_argument("--k", type=int, default=3, help="random CHLP: edge size (k-uniform)")
    parser.add_argument("--s", type=int, default=9, help="random CHLP: allowed label tuples per edge")
    parser.add_argument("--tau", type=int, default=3, help="random CHLP: labels per vertex")
    parser.add_argument("--density", type=float, default=1.0, help="random CHLP: edges per vertex (m = density*n)")
    parser.add_argument("--onnx", action="store_true", help="also the ONNX models on meshes (tile-onnx section)")
    parser.add_argument("--onnx-only", action="store_true", help="only the ONNX models on meshes")
    parser.add_argument("--onnx-time-limit", type=float, default=120.0, help="seconds per ONNX row, all methods")
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers for the ONNX rows")
    parser.add_argument("--onnx-verify", action="store_true", help="run every ONNX row's best plan under --verify")
    args = parser.parse_args(argv)
    if args.quick:
        args.time_limit = min(args.time_limit, 2.0)
        sizes, seeds, prog_sizes, prog_seeds, args.repeats = [10, 30, 100], [0], [(4, 10), (10, 50)], [0], 1
    else:
        sizes, seeds, prog_sizes, prog_seeds, args.repeats = [10, 30, 100, 300, 1000], [0, 1, 2], \
            [(4, 10), (10, 50), (20, 200)], [0, 1], 3
    command = "python scripts/bench_tile.py" + (" " + " ".join(sys.argv[1:]) if argv is None and sys.argv[1:]
                                                else "")
    if args.onnx or args.onnx_only:
        onnx_section(args, command)
    if args.onnx_only:
        return 0
    start = time.perf_counter()
    paper = paper_rows(args.time_limit, args.repeats)
    chlp = chlp_rows(sizes, seeds, args.k, args.s, args.tau, args.density, args.time_limit)
    programs = program_rows(prog_sizes, prog_seeds, args.time_limit)
    elapsed = time.perf_counter() - start
    text = markdown(paper, chlp, programs, args, command, elapsed)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"paper": paper, "chlp": chlp, "programs": programs,
                                         "verdicts": verdicts(paper, chlp + programs)}, indent=1))
    if not args.no_write:
        write_section("tile", text)
    return 0


def onnx_section(args, command: str) -> None:
    """The ONNX models on meshes (:mod:`bench_tile_onnx`): rows, targets, the ``tile-onnx`` section."""
    import bench_tile_megatron
    import bench_tile_onnx

    start = time.perf_counter()
    rows = bench_tile_onnx.run(args.quick, args.onnx_time_limit, args.workers, args.onnx_verify)
    megatron = bench_tile_megatron.rows(min(args.onnx_time_limit, bench_tile_megatron.TARGET_2D_S), args.workers,
                                        bench_tile_megatron.MESHES[1::2] if args.quick else bench_tile_megatron.MESHES)
    text = bench_tile_onnx.markdown(rows, command, time.perf_counter() - start, machine_line(),
                                    args.onnx_time_limit, args.quick)
    text += "\n\n" + bench_tile_megatron.markdown(megatron, min(args.onnx_time_limit, bench_tile_megatron.TARGET_2D_S))
    print(text)
    if args.json:
        args.json.with_suffix(".onnx.json").write_text(json.dumps({"rows": rows, "megatron": megatron}, indent=1,
                                                                  default=str))
    if not args.no_write:
        write_section("tile-onnx", text)


if __name__ == "__main__":
    sys.exit(main())
