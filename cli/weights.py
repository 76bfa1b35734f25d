"""``--weights``: how the models a command emits get the input's external-data weights, and the progress
bar of the copies (the library reports, :data:`onnxpart.data_files.Progress`; the command line draws)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from onnxpart.cli.common import err_console

WEIGHTS_HELP = ("How emitted models get the input's external-data weights: copy (each output owns its bytes: "
                "reflinked where the file system can, else copied in the kernel keeping holes; safe against later "
                "edits of the input), link (hard links into the output: nothing copied, but an in-place edit of "
                "the input changes the output; onnx.checker refuses hard-linked data by path, onnxruntime runs "
                "it), reference (nothing copied: the files read the input's data files where they are, and name "
                "that folder; the output then needs the input where it is). Embedded weights are always copied.")
WeightsOpt = Annotated[str, typer.Option("--weights", help=WEIGHTS_HELP)]
BAR_BYTES = 64 << 20  # a copy this big gets a bar; smaller ones end before one would be read


def weights_policy(loaded, threshold: Optional[str], weights: str, output: Optional[Path], quiet: bool):
    """The emission policy (:func:`onnxpart.loading.weight_policy`) with ``--weights``, checked before any
    work, and a progress bar on stderr for big copies (none with ``quiet``, e.g. ``--json``); None for a
    graph file (``loaded`` None: no model to write, the option checked all the same). A note says when the
    input has no data file to link or reference (its embedded weights are copied), or that it is referenced."""
    from onnxpart.loading import weight_policy
    from onnxpart.writer import weight_mode

    if loaded is None:
        weight_mode(weights)
        return None
    policy = weight_policy(loaded, threshold, weights, output, progress=CopyBar(quiet))
    if quiet or weights == "copy":
        return policy
    if not policy.always_external:
        err_console.print(f"[yellow]note:[/] --weights {weights}: {loaded.path.name} embeds its weights (no "
                          "data file to share); they are copied into the outputs", highlight=False)
    elif weights == "reference":
        err_console.print(f"[yellow]note:[/] --weights reference: the emitted models read their weights from "
                          f"{loaded.folder}, which must stay where it is", highlight=False)
    return policy


class CopyBar:
    """A transient rich bar per data file of at least :data:`BAR_BYTES` being copied: bytes done of the
    file's, and the rate. Drawn only while a copy runs (the verify spinner follows it on the same console)."""

    def __init__(self, quiet: bool):
        self.quiet, self.bar, self.tasks = quiet, None, {}

    def __call__(self, name: str, done: Optional[int], total: int) -> None:
        if self.quiet or total < BAR_BYTES:
            return
        if done is None:
            if self.bar is not None and self.tasks.pop(name, None) is not None and not self.tasks:
                self.bar.stop()
                self.bar = None
            return
        if self.bar is None:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.bar = Progress(TextColumn("copying {task.description}"), BarColumn(),
                                DownloadColumn(binary_units=True), TransferSpeedColumn(), TimeRemainingColumn(),
                                console=err_console, transient=True)
            self.bar.start()
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=total)
        self.bar.update(self.tasks[name], completed=done)
