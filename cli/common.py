"""What every command shares: loading a costed graph from a model or a costs file, the options that
say how, error handling, and the terminal."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from onnxpart.errors import UserError
from onnxpart.strategy import choose, comma_list  # noqa: F401  (the commands' one parser of comma-separated choices)
from onnxpart.units import SEED, Range, parse_bytes, parse_fraction

# Limits of the numeric options (README, "Limits"): far above real use, they keep what an option sizes
# bounded. The limits numbers share with input files (devices, batch, seed) are in onnxpart.units.
TIME_LIMIT = Range(0.1, 1e7, noun="a number of seconds")
ORDER_TIME_LIMIT = Range(0, 1e7, noun="a number of seconds")
WORKERS = Range(0, 4096, integer=True)
VERIFY_TOL = Range(0, 1e6)
STAGES = Range(1, 1024, integer=True)
FRACTION = Range(0, 1, noun="a fraction")
POPULATION = Range(2, 100_000, integer=True)
GENERATIONS = Range(0, 1_000_000, integer=True)
RANDOM_ORDERS = Range(0, 1_000_000, integer=True)
MIN_TIME = Range(0, 3600, noun="a number of seconds")
#: --min-time's default (annotate --cost measured, bench): Google Benchmark's min_time
MIN_TIME_DEFAULT = 0.5
BESIDE = Range(0, 4096, integer=True)
IDEAL_LIMIT = Range(0, 10_000_000, integer=True)
MAX_RECOMPUTE = Range(1, 16, integer=True)
ITERATIONS = Range(1, 100_000_000, integer=True)
MAX_PIECES = Range(1, 1_000_000, integer=True)
RUNS = Range(1, 1000, integer=True)
TOP = Range(0, 1_000_000, integer=True)


@dataclass(frozen=True)
class Quantity:
    """The rule of a text option that holds a quantity (``25GB/s``, ``80%``): the unit parser of
    :mod:`onnxpart.units` that reads it, ``parse(text, option)``."""

    parse: Callable[[str, str], Any]

    def check(self, text: str, what: str) -> Any:
        return self.parse(text, what)


console = Console()
err_console = Console(stderr=True)
log = logging.getLogger("onnxpart")

# Options shared by commands that read a model (Typer declares them per command; these are the texts).
INPUT_SHAPE_HELP = ("Shape of a graph input (or of an internal tensor inference cannot see through): "
                    "NAME=DIMS, e.g. input_ids=1x128, or NAME=DIMS:DTYPE (repeatable).")
FORCE_SHAPE_HELP = ("Let --input-shape replace dims the model fixes (costing only: emitted models keep the model's "
                    "declared types, and --verify runs at them).")
DIM_HELP = ("Fix a symbolic dim by its name for costing, e.g. batch=1 (repeatable; `inspect` lists the names). "
            "Emitted models keep it dynamic unless --freeze-dims.")
FREEZE_HELP = "Write the --dim/--input-shape values into emitted models instead of keeping their dims symbolic."
EXTERNAL_HELP = ("Emitted models whose weights exceed this size are written as NAME.onnx + NAME.onnx.data "
                 "(always when the input uses external data).")
VERIFY_TOL_HELP = "--verify fails (exit 1) when an output's error relative to its scale exceeds this."
COST_HELP = "Cost model: analytic (roofline on --device) or measured (onnxruntime profiling here)."
DEVICE_HELP = "Device for the analytic model: cpu, t4, a100, h100, or a YAML/JSON spec file."
COSTS_HELP = "Reuse a costs.json from `onnxpart annotate` instead of costing again."
COARSEN_HELP = "Merge single-consumer elementwise chains into their producer first (smaller n)."
FORMAT_HELP = ("Input format: auto (a .json file is a graph, recognised by its keys; anything else an ONNX model), "
               "onnx, costs, dnn-partitioning, node-link.")


# ---------------------------------------------------------------------------------------- the kit
# One definition per shared option, with one meaning on every command (Typer reads ``Annotated``).
InputShapeOpt = Annotated[Optional[list[str]], typer.Option("--input-shape", help=INPUT_SHAPE_HELP)]
ForceShapeOpt = Annotated[bool, typer.Option("--force-shape", help=FORCE_SHAPE_HELP)]
DimOpt = Annotated[Optional[list[str]], typer.Option("--dim", help=DIM_HELP)]
FreezeDimsOpt = Annotated[bool, typer.Option("--freeze-dims", help=FREEZE_HELP)]
ExternalDataOpt = Annotated[Optional[str], typer.Option("--external-data-threshold",
                                                       help=EXTERNAL_HELP + " [default: 1GiB]"), Quantity(parse_bytes)]
CostOpt = Annotated[str, typer.Option("--cost", help=COST_HELP)]
DeviceOpt = Annotated[str, typer.Option("--device", help=DEVICE_HELP)]
CostsOpt = Annotated[Optional[Path], typer.Option("--costs", help=COSTS_HELP)]
CoarsenOpt = Annotated[bool, typer.Option("--coarsen", help=COARSEN_HELP)]
FormatOpt = Annotated[str, typer.Option("--format", help=FORMAT_HELP)]
OUTPUT_HELP = ("Output folder (written atomically; never over a file the run reads; an existing empty folder "
               "is used).")
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help=OUTPUT_HELP)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace an existing output folder that onnxpart wrote "
                                        "(it holds onnxpart's certificate.json).")]
CleanOpt = Annotated[bool, typer.Option("--clean", help="With --force: also replace an output that onnxpart did "
                                        "not write, deleting what it holds.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout (nothing else there).")]
TimeLimitOpt = Annotated[float, typer.Option("--time-limit", help="Total wall-clock seconds for the whole solve: "
                                             "every method, search and bound together."), TIME_LIMIT]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every randomized search and of --verify's inputs "
                                      "(same inputs and seed, same files)."), SEED]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Cores the solvers may use: background processes and "
                                         "solver threads (0: all of this machine's)."), WORKERS]
MaxGapOpt = Annotated[Optional[str], typer.Option("--max-gap", help="Exit with code 3 unless the certified "
                                                  "gap 1 − LB/UB is at most this (e.g. 5%); the files are written."),
                      Quantity(parse_fraction)]
CheckCertificateOpt = Annotated[Optional[Path], typer.Option("--check-certificate", help="Re-check an earlier "
                                                             "output folder against this model instead of solving.")]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Run the written models in onnxruntime on seeded inputs "
                                         "(at the costed dims and at twice each dynamic dim) against the original.")]
VerifyTolOpt = Annotated[float, typer.Option("--verify-tol", help=VERIFY_TOL_HELP), VERIFY_TOL]


def checked_options(command: Callable) -> dict[str, tuple[str, Range | Quantity]]:
    """Parameter -> (the option as the user writes it, its rule) for every option of ``command`` whose
    annotation carries a :class:`~onnxpart.units.Range` (``Annotated[int, typer.Option("-k"), STAGES]``)
    or a :class:`Quantity`: :func:`handle_errors` checks each before the command runs, so a bad number is
    refused before any model is read."""
    checks = {}
    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        extras = getattr(hint, "__metadata__", ())
        allowed = next((m for m in extras if isinstance(m, (Range, Quantity))), None)
        if allowed is not None:
            option = next((m for m in extras if isinstance(m, typer.models.OptionInfo)), None)
            decls = () if option is None else (option.default, *option.param_decls)  # Annotated: the first
            decls = [d for d in decls if isinstance(d, str) and d.startswith("-")]  # name sits in `default`
            checks[name] = (decls[0] if decls else "--" + name.replace("_", "-"), allowed)
    return checks


class RunClock:
    """The wall clock of one command, for ``--time-limit`` as the whole command's limit and for the JSON
    result's ``seconds``: started by :func:`handle_errors`, marked when solving starts (:meth:`solve_seconds`,
    which also says how much of the limit loading left) and when writing starts (:func:`write_outputs`)."""

    #: the least a solve is given, however long loading took: enough for each strategy's first answer
    FLOOR = 0.5

    def __init__(self) -> None:
        self.start = self.solving = self.writing = None

    def begin(self) -> None:
        self.start, self.solving, self.writing = time.monotonic(), None, None

    def solve_seconds(self, time_limit: float) -> float:
        """Seconds left of ``time_limit`` for solving after what the command spent so far (loading,
        costing), at least :attr:`FLOOR`; marks the start of solving."""
        self.solving = time.monotonic()
        spent = self.solving - self.start if self.start is not None else 0.0
        return max(time_limit - spent, min(self.FLOOR, time_limit))

    def mark_writing(self) -> None:
        """Writing starts now, unless a command marked it earlier (remat builds its model before
        :func:`write_outputs`): the first mark stands."""
        if self.writing is None:
            self.writing = time.monotonic()

    def seconds(self) -> dict[str, float | None]:
        """``{"load", "solve", "write"}`` seconds so far (None for a phase the command did not mark)."""
        now = time.monotonic()
        start = self.start if self.start is not None else now
        solving = self.solving if self.solving is not None else start
        writing = self.writing if self.writing is not None else now
        return {"load": round(solving - start, 3), "solve": round(writing - solving, 3),
                "write": round(now - writing, 3) if self.writing is not None else None}


run_clock = RunClock()


def handle_errors(command: Callable) -> Callable:
    """Check the command's numeric and quantity options (:func:`checked_options`), then run it; a UserError
    becomes a one-line message and its exit code; Ctrl-C and SIGTERM (which :mod:`onnxpart.interrupts`
    raises as KeyboardInterrupt) one line and exit 130 or 143 — the output folders' ``with`` blocks have
    removed what they staged, so nothing is written. Bugs keep their tracebacks."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        run_clock.begin()
        try:
            for name, (option, allowed) in checked_options(command).items():
                if kwargs.get(name) is not None:
                    allowed.check(kwargs[name], option)
            return command(*args, **kwargs)
        except UserError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as interrupt:
            _interrupted(interrupt)
        except Exception:
            from onnxpart.interrupts import received

            interrupt = received()  # the signal, wrapped by the library it interrupted
            if interrupt is None:
                raise
            _interrupted(interrupt)

    return wrapper


def _interrupted(interrupt: KeyboardInterrupt) -> None:
    from onnxpart.interrupts import exit_code

    err_console.print("[yellow]interrupted:[/] nothing written", highlight=False)
    raise typer.Exit(exit_code(interrupt)) from None


def load_costed(path: Path, **options: Any):
    """:func:`onnxpart.loading.load_costed` with a spinner while onnxruntime profiles (``--cost measured``).
    What loading built lives as long as the command: it is frozen out of the garbage collector's passes
    (``gc.freeze``), each of which walked all of it (13 full passes, 1.4 s, in one 20,000-op tile run)."""
    import gc

    from onnxpart.loading import load_costed as load

    if options.get("cost") != "measured":
        loaded = load(path, **options)
    else:
        from onnxpart.cost_models.measured import Profiling

        runs = (options.get("profiling") or Profiling()).runs
        with err_console.status(f"profiling {path.name} in onnxruntime ({runs}+ runs)…"):
            loaded = load(path, **options)
    gc.freeze()
    return loaded


def print_json(payload: Any) -> None:
    """Machine output on stdout: plain JSON, nothing else."""
    sys.stdout.write(json.dumps(payload, indent=2, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(type(value).__name__)


def print_closing(summary: dict, certificate_text: str, what: str) -> None:
    """The last lines of a command's report: its certificate, ``--verify``'s line (``what`` reproduce the
    model's outputs) and the output folder."""
    console.print(certificate_text, highlight=False)
    if summary["verify"] is not None:
        console.print(verify_line(summary["verify"], what), highlight=False, soft_wrap=True)
    console.print(f"wrote {summary['output']}", highlight=False)


def verify_line(report: dict, what: str) -> str:
    """One line for a ``--verify`` report (onnxpart.verify.VerifyReport.to_dict())."""
    if report.get("skipped"):
        return f"verify: {report['skipped']}"
    sizes = "; ".join(f"{_dims_text(size['dims'])}max abs {size['max_abs_error']:.3g}, relative "
                      f"{size['max_rel_error']:.3g}" for size in report["sizes"])
    notes = "".join(f" ({note})" for note in report["notes"])
    return f"verify: {what} reproduce the model's outputs ({sizes}; tolerance {report['tolerance']:g}){notes}"


def _dims_text(dims: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in dims.items()) + ": " if dims else ""


@contextlib.contextmanager
def progress_bar(time_limit: float, fmt: Callable[[float, str], str], disable: bool = False,
                 phases: dict[str, str] | None = None):
    """One live view for every command: a rich progress bar over ``time_limit`` seconds showing the
    phase, the incumbent, the proven bound and the gap of each :class:`onnxpart.board.Progress` record
    sent to the callback it yields. ``fmt(value, phase)`` renders a value in the phase's unit."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=disable) as bar:
        task = bar.add_task("starting", total=time_limit)

        def update(record) -> None:
            phase = (phases or {}).get(record.phase, record.phase)
            bar.update(task, completed=min(record.seconds, time_limit),
                       description=f"{phase:<12} best {fmt(record.upper, record.phase)}  proven ≥ "
                                   f"{fmt(record.lower, record.phase)}  gap {record.gap:.1%}")

        yield update


def gap_limit(max_gap: Optional[str]) -> Optional[float]:
    """``--max-gap`` as a fraction (checked to lie in [0, 1): :func:`onnxpart.units.parse_fraction`)."""
    return parse_fraction(max_gap, "--max-gap") if max_gap is not None else None


def enforce_gap(certificate: dict, limit: Optional[float], output) -> None:
    """Exit 3 (the files stay written) when the certified gap is above ``--max-gap``."""
    from onnxpart.errors import GapNotMetError

    gap = certificate["gap"]
    if limit is not None and (gap is None or gap > limit + 1e-12):
        shown = "no lower bound" if gap is None else f"gap {gap:.2%}"
        where = f"; results are in {output}" if output else ""
        raise GapNotMetError(f"not provably within --max-gap {limit:.2%} ({shown}){where}")


def result(output, manifest: dict, certificate: dict, verify: Optional[dict], **extra: Any) -> dict:
    """The one JSON result shape of every strategy command."""
    return {"output": None if output is None else str(output), "manifest": manifest, "certificate": certificate,
            "verify": verify, "seconds": run_clock.seconds(), **extra}


def write_outputs(out, manifest_name: str, manifest: Callable[[Any], dict], cert, *,
                  models: Optional[Callable[[Any], Any]] = None,
                  verify: Optional[Callable[[Any, dict], dict]] = None, report_in: str = "certificate",
                  extras: Optional[Callable[[Any, dict], None]] = None, **summary: Any) -> dict:
    """The one write sequence of every strategy command, inside ``out``'s atomic commit
    (:class:`onnxpart.files.OutputDir`; None: nothing is written): ``models(out)`` writes the models and
    says which (e.g. ``{stage: file}``), ``manifest(that)`` makes the manifest, ``verify(out, manifest)``
    runs the written files (``--verify``: a mismatch raises, and nothing is committed) and returns its
    report, kept in the ``certificate``'s details or the ``manifest`` (``report_in``); then
    ``manifest_name``, ``certificate.json`` and ``extras(out, manifest)`` (charts) are written. ``cert`` is
    the :class:`~onnxpart.certificate.Certificate`. -> the one JSON result (:func:`result`) with ``summary``."""
    from onnxpart.files import write_json
    from onnxpart.interrupts import received

    run_clock.mark_writing()
    interrupt = received()
    if interrupt is not None:  # a signal whose interrupt a library swallowed (a finalizer, a wrapper)
        raise interrupt
    if out is None:
        return result(None, manifest(None), cert.to_dict(), None, **summary)
    report = None
    with out:
        payload = manifest(models(out) if models is not None else None)
        if verify is not None:
            report = verify(out, payload)
            (cert.details if report_in == "certificate" else payload)["verify"] = report
        write_json(out.path(manifest_name), payload)
        write_json(out.path("certificate.json"), cert.to_dict())
        if extras is not None:
            extras(out, payload)
    return result(out.target, payload, cert.to_dict(), report, **summary)


def check_folder(folder: Path, manifest_name: str, check: Callable[[Any, Any], tuple[list[str], dict]],
                 ok_line: Callable[[dict], str], as_json: bool, problem: Optional[str] = None) -> None:
    """``--check-certificate`` for every command: the folder must exist; its ``manifest_name`` must be
    JSON and its certificate.json pass the certificate schema (:mod:`onnxpart.certificate_check`; else
    exit 2 naming the file and field). ``check(manifest, certificate) -> (problems, facts)`` is the
    strategy's independent recomputation (it validates its manifest's own schema); the certificate's own
    formulas are checked after it, and its ``problem`` against ``problem`` when given. Facts go to
    ``--json`` or ``ok_line(facts)``; problems exit 2, the first named (all of them under ``--json``)."""
    from onnxpart.certificate_check import consistency_problems, read_certificate
    from onnxpart.files import read_json

    if not folder.is_dir():
        raise UserError(f"--check-certificate {folder}: the folder does not exist")
    manifest = read_json(folder / manifest_name, manifest_name)
    cert, stored = read_certificate(folder / "certificate.json")
    if problem is not None and cert.problem != problem:
        raise UserError(f"{folder / 'certificate.json'} is a {cert.problem!r} certificate, not {problem!r}")
    problems, facts = check(manifest, cert)
    problems = problems + consistency_problems(cert, stored)
    if as_json:
        print_json({"ok": not problems, **facts, "problems": problems})
    if problems:
        more = f" (and {len(problems) - 1} more problems; --json lists them)" if len(problems) > 1 else ""
        raise UserError(f"certificate check failed: {problems[0]}{more}")
    log.info("certificate %s checked", folder)
    if not as_json:
        console.print(ok_line(facts), highlight=False)


def certificate_line(cert: dict, objective: str, fmt: Callable[[float], str]) -> str:
    """``objective UB, proven ≥ LB (gap, the method that proved the most)`` for a certificate dict."""
    ub, lb, gap = cert["upper_bound"], cert["best_lower_bound"], cert["gap"]
    if lb is None:
        return f"{objective} {fmt(ub)}, no lower bound proven"
    best = max((b for b in cert["lower_bounds"] if b["value"] is not None), key=lambda b: b["value"])
    return f"{objective} {fmt(ub)}, proven ≥ {fmt(lb)} (gap {gap:.1%}, {best['method']})"


def verify_written(out, loaded, entries: list[dict], check: dict, what: str, run=None):
    """``--verify`` on the parts just written into ``out`` (manifest entries with ``file`` and ``inputs``),
    run in order against the original — by :func:`onnxpart.verify.verify_parts`, or by
    ``run(loaded, [(file, entry)], seed=, tolerance=)`` when given; a mismatch raises (exit 1) before the
    folder is committed."""
    from onnxpart.verify import VerifyReport, too_big_to_run, verify_parts

    skipped = too_big_to_run(loaded.model)
    if skipped is not None:
        return VerifyReport(seed=check["seed"], tolerance=check["tolerance"], skipped=skipped)
    runs = [(out.path(entry["file"]), entry) for entry in entries if entry["file"]]
    with err_console.status(f"running the {what} in onnxruntime…"):
        if run is None:
            report = verify_parts(loaded, [(path, entry["inputs"]) for path, entry in runs], seed=check["seed"],
                                  tolerance=check["tolerance"], freeze=check["freeze"])
        else:
            report = run(loaded, runs, seed=check["seed"], tolerance=check["tolerance"], freeze=check["freeze"])
    report.raise_if_failed()
    return report
