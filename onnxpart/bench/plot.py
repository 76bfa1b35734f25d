"""``bench.png``: predicted against measured seconds per unit, log-log, with the line y = x (a unit on it
was predicted exactly; above it, slower than predicted) and the ±25% band around it."""

from __future__ import annotations

from pathlib import Path

from onnxpart.bench.report import Row

#: marker per kind of row
MARKERS = {"stage": "o", "piece": "o", "shard": ".", "chain": "s", "pipeline-period": "D", "pipeline-latency": "^",
           "one-worker-period": "v", "pipeline-stage": "*", "remat": "P", "original": "X"}


def plot(path: Path, rows: list[Row], title: str) -> None:
    """Write the chart of the timed rows of ``rows`` (those with both numbers > 0) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in rows if r.quantity == "seconds" and (r.predicted or 0) > 0 and (r.measured or 0) > 0]
    fig, ax = plt.subplots(figsize=(6, 5.5), dpi=110)
    for kind in dict.fromkeys(r.kind for r in timed):
        some = [r for r in timed if r.kind == kind]
        ax.scatter([r.predicted for r in some], [r.measured for r in some], marker=MARKERS.get(kind, "o"),
                   label=kind, alpha=0.8)
    values = [v for r in timed for v in (r.predicted, r.measured)] or [1e-6, 1e-3]
    low, high = min(values) / 1.5, max(values) * 1.5
    ax.plot([low, high], [low, high], color="0.3", lw=1, label="measured = predicted")
    ax.fill_between([low, high], [low / 1.25, high / 1.25], [low * 1.25, high * 1.25], color="0.85", label="±25%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("predicted (s)")
    ax.set_ylabel("measured median (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
