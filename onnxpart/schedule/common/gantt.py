"""``gantt.png``: a schedule drawn from its manifest's events, for either objective.

Made to be read: the time axis is in the unit the title's makespan is written in (µs, ms:
:func:`onnxpart.units.seconds_unit`), with no offset; every op is its own bar, consecutive bars of one
device in alternating shades with a white boundary between them, so a run of hundreds of ops never
merges into a solid band; bars are labelled with their op's name (a throughput slice with its batch
range) where the text fits inside the bar, at most :data:`MAX_LABELS` labels, the widest bars first.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from onnxpart.units import seconds_unit

#: The most bar labels one chart carries (the widest bars get them).
MAX_LABELS = 80
#: The chart's width (inches) and a label character's width as a share of it at 7 pt: a label fits a bar
#: that spans at least ``len(text) ×`` this share of the time axis.
WIDTH = 12.0
CHAR = 0.0075


def bar_label(entry: dict[str, Any]) -> str:
    """An op's bar text: its name; a throughput slice's adds its batch range, ``"name lo–hi"`` (inclusive)."""
    if "inputs" not in entry:
        return entry["name"]
    lo, hi = entry["inputs"]
    return f"{entry['name']} {lo}–{hi - 1}" if hi - lo > 1 else f"{entry['name']} {lo}"


def fitting(text: str, width: float, span: float) -> str:
    """The longest of ``text`` and its batch range alone (the part after the last space) that fits a bar
    ``width`` of the ``span`` wide (:data:`CHAR`); ``""`` when neither does."""
    for candidate in (text, text.rsplit(" ", 1)[-1]):
        if span > 0 and width / span >= CHAR * len(candidate):
            return candidate
    return ""


def labels(ops: Sequence[dict[str, Any]], span: float, cap: int = MAX_LABELS) -> dict[int, str]:
    """``{index in ops: text}``: each bar's :func:`bar_label`, shortened to what fits (:func:`fitting`),
    for at most ``cap`` bars, the widest first."""
    widest = sorted(range(len(ops)), key=lambda n: (-(ops[n]["end"] - ops[n]["start"]), n))
    out: dict[int, str] = {}
    for n in widest:
        if len(out) == cap:
            break
        text = fitting(bar_label(ops[n]), ops[n]["end"] - ops[n]["start"], span)
        if text:
            out[n] = text
    return out


def gantt_figure(devices: Sequence[str], ops: Sequence[dict[str, Any]], transfers: Sequence[dict[str, Any]],
                 title: str):
    """The chart (a matplotlib Figure; module docstring): one row per device and one per used link;
    ``ops[]`` entries (name, device, start, end; a throughput slice's ``inputs``) and ``transfers[]``
    entries (from, to, start, end) as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    row = {name: u for u, name in enumerate(devices)}
    links = sorted({(t["from"], t["to"]) for t in transfers}, key=lambda link: (row[link[0]], row[link[1]]))
    rows = list(devices) + [f"{a}→{b}" for a, b in links]
    span = max((e["end"] for e in [*ops, *transfers]), default=0.0)
    unit, scale = seconds_unit(span)
    fig, ax = plt.subplots(figsize=(WIDTH, 1.0 + 0.45 * len(rows)), dpi=100)
    # one broken_barh per row (2,816 slices took 12 s drawn as single bars)
    bars: list[list[tuple[float, float]]] = [[] for _ in rows]
    for entry in sorted(ops, key=lambda e: (row[e["device"]], e["start"])):
        bars[row[entry["device"]]].append((entry["start"] / scale, (entry["end"] - entry["start"]) / scale))
    link_row = {link: len(devices) + n for n, link in enumerate(links)}
    for t in transfers:
        bars[link_row[(t["from"], t["to"])]].append((t["start"] / scale, (t["end"] - t["start"]) / scale))
    palette = plt.get_cmap("tab10")
    for r, spans in enumerate(bars):
        if r < len(devices):  # alternating shades: neighbouring ops stay apart however thin
            shades = [to_rgba(palette(r % 10), 1.0 if n % 2 == 0 else 0.55) for n in range(len(spans))]
            ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=shades, edgecolor="white", linewidth=0.4)
        else:
            ax.broken_barh(spans, (r - 0.4, 0.8), facecolors="lightgray", edgecolor="dimgray", linewidth=0.3)
    for n, text in labels(ops, span).items():
        entry = ops[n]
        ax.text((entry["start"] + entry["end"]) / 2 / scale, row[entry["device"]], text, ha="center", va="center",
                fontsize=7, clip_on=True)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.set_xlim(0, span / scale if span > 0 else 1.0)
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def gantt_png(devices: Sequence[str], ops: Sequence[dict[str, Any]], transfers: Sequence[dict[str, Any]],
              title: str) -> bytes:
    """:func:`gantt_figure` as PNG bytes."""
    import matplotlib.pyplot as plt

    fig = gantt_figure(devices, ops, transfers, title)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
