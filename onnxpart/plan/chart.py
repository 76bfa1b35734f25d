"""``plan.png``: the plan as a picture, drawn from the manifest (matplotlib, Agg).

Left, the cluster: one cell per device, a row per node, coloured by the stage it runs, hatched and labelled by
its replica (``s1 r0``); idle devices grey. Right, the pipeline's timeline as GPipe draws it: one row per stage,
one bar per micro-batch of replica 0 (its number inside), from the predicted compute and transfer times —
micro-batch m enters stage s when its inputs have arrived (the source's compute plus the transfer) and stage s
is done with micro-batch m − 1 (a period: compute and the stage's transfers, the link not overlapped). The
first :data:`DRAWN` micro-batches are drawn.
"""

from __future__ import annotations

from typing import Any

from onnxpart.units import format_seconds

#: The micro-batches the timeline draws at most.
DRAWN = 16
HATCHES = ("", "//", "\\\\", "xx", "..", "++", "oo", "--")


def timeline(manifest: dict[str, Any]) -> list[tuple[int, int, float, float]]:
    """(stage, micro-batch, start, end) of each compute bar of replica 0 (module docstring)."""
    stages, transfers = manifest["stages"], manifest["transfers"]
    into: dict[int, list[tuple[int, float]]] = {}
    for t in transfers:
        into.setdefault(t["target"], []).append((t["source"], t["seconds"]))
    bars, end = [], {}
    for m in range(min(manifest["micro_batches"], DRAWN)):
        for s, stage in enumerate(stages):
            ready = max([end[(src, m)] + seconds for src, seconds in into.get(s, [])], default=0.0)
            free = end.get((s, m - 1), 0.0) + (stage["period_s"] - stage["compute_s"]) if m else 0.0
            start = max(ready, free)
            end[(s, m)] = start + stage["compute_s"]
            bars.append((s, m, start, end[(s, m)]))
    return bars


def plan_png(path, manifest: dict[str, Any], title: str) -> None:
    """Write the picture (module docstring) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cluster, stages = manifest["cluster"], manifest["stages"]
    nodes, per = cluster["nodes"], cluster["devices_per_node"]
    fig, (grid, line) = plt.subplots(1, 2, figsize=(12, max(3.0, 0.5 * max(nodes, len(stages)) + 2)), dpi=110,
                                     gridspec_kw={"width_ratios": [1, 1.6]})
    colours = plt.get_cmap("tab10")
    _grid(grid, stages, nodes, per, colours)
    _timeline(line, manifest, colours)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def _grid(ax, stages: list[dict], nodes: int, per: int, colours) -> None:
    """The cluster's devices, nodes × devices per node, by stage and replica."""
    from matplotlib.patches import Rectangle

    owner = {}
    for s, stage in enumerate(stages):
        for r, devices in enumerate(stage["devices"]):
            for d in devices:
                owner[d] = (s, r)
    label = nodes * per <= 64
    for device in range(nodes * per):
        node, slot = divmod(device, per)
        s, r = owner.get(device, (None, 0))
        colour = "0.85" if s is None else colours(s % 10)
        ax.add_patch(Rectangle((slot, nodes - 1 - node), 0.95, 0.95, facecolor=colour, edgecolor="0.3",
                               hatch=HATCHES[r % len(HATCHES)] if s is not None else ""))
        if label:
            ax.text(slot + 0.47, nodes - 0.53 - node, "idle" if s is None else f"s{s} r{r}", ha="center",
                    va="center", fontsize=7)
    ax.set_xlim(0, per)
    ax.set_ylim(0, nodes)
    ax.set_xticks([d + 0.47 for d in range(per)], [str(d) for d in range(per)], fontsize=7)
    ax.set_yticks([nodes - 0.53 - n for n in range(nodes)], [f"node {n}" for n in range(nodes)], fontsize=7)
    ax.set_xlabel("device in node")
    ax.set_title("devices by stage (colour) and replica (hatch)", fontsize=9)
    ax.set_aspect("equal", adjustable="box")


def _timeline(ax, manifest: dict[str, Any], colours) -> None:
    """One row per stage, one bar per micro-batch of replica 0."""
    bars = timeline(manifest)
    for s, m, start, end in bars:
        ax.barh(s, end - start, left=start, color=colours(s % 10), edgecolor="0.2", height=0.7)
        if len(bars) <= 128:
            ax.text((start + end) / 2, s, str(m), ha="center", va="center", fontsize=7)
    stages = manifest["stages"]
    ax.set_yticks(range(len(stages)), [f"stage {s['index']} ({s['mesh']['name']})" for s in stages], fontsize=7)
    ax.invert_yaxis()
    finish = max((end for *_, end in bars), default=0.0)
    shown = min(manifest["micro_batches"], DRAWN)
    more = f" (first {DRAWN} of {manifest['micro_batches']})" if manifest["micro_batches"] > DRAWN else ""
    ax.set_xlabel("seconds")
    ax.set_title(f"pipeline of replica 0: {shown} micro-batch(es){more}, {format_seconds(finish)}", fontsize=9)
    ax.margins(x=0.02)
