"""``gantt.png``: a schedule drawn from its manifest's events, for either objective."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any


def slice_label(entry: dict[str, Any], span: float) -> str:
    """``"lo–hi"`` (inclusive) for a batch slice's bar that spans at least ``0.9 %`` of the chart per
    character (wide enough for its text at 7 pt on the 10-inch chart); ``""`` for latency ops or
    narrow bars."""
    if "inputs" not in entry or span <= 0:
        return ""
    lo, hi = entry["inputs"]
    text = f"{lo}–{hi - 1}" if hi - lo > 1 else f"{lo}"
    return text if (entry["end"] - entry["start"]) / span >= 0.009 * len(text) else ""


def gantt_png(devices: Sequence[str], ops: Sequence[dict[str, Any]], transfers: Sequence[dict[str, Any]],
              title: str) -> bytes:
    """A Gantt chart from the manifest's events (PNG bytes), for either objective: one row per device
    and one per used link; ``ops[]`` entries (name, device, start, end — for throughput a batch slice
    of Section 3.2, labelled with its input range by :func:`slice_label`) and ``transfers[]`` entries
    (from, to, start, end) as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row = {name: u for u, name in enumerate(devices)}
    links = sorted({(t["from"], t["to"]) for t in transfers}, key=lambda link: (row[link[0]], row[link[1]]))
    rows = list(devices) + [f"{a}→{b}" for a, b in links]
    span = max((e["end"] for e in [*ops, *transfers]), default=0.0)
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.45 * len(rows)), dpi=100)
    colors = plt.get_cmap("tab10")
    # one broken_barh per row (2,816 slices took 12 s drawn as single bars)
    bars: list[list[tuple[float, float]]] = [[] for _ in rows]
    for entry in ops:
        u = row[entry["device"]]
        bars[u].append((entry["start"], entry["end"] - entry["start"]))
        label = slice_label(entry, span)
        if label:
            ax.text((entry["start"] + entry["end"]) / 2, u, label, ha="center", va="center", fontsize=7)
    link_row = {link: len(devices) + n for n, link in enumerate(links)}
    for t in transfers:
        bars[link_row[(t["from"], t["to"])]].append((t["start"], t["end"] - t["start"]))
    for r, spans in enumerate(bars):
        device = r < len(devices)
        ax.broken_barh(spans, (r - 0.4, 0.8), facecolors=colors(r % 10) if device else "lightgray",
                       edgecolor="black" if device else "dimgray", linewidth=0.3)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_title(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()
