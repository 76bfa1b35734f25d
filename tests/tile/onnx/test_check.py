"""`onnxpart tile --check-certificate` recomputes from what plan.json says: malformed files (issue 26) and
tampered plans (issue 28: a Softmax sharded along its own axis, a resharding missing from the list) exit 2
with one line naming the problem — the field, the op, the tensor — and touch nothing."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from onnxpart.certificate import Certificate
from onnxpart.loading import load_costed
from onnxpart.onnx_constants import small_constants
from onnxpart.tile.onnx.build import build_layout_instance
from onnxpart.tile.onnx.check import check_plan
from tests.safety.harness import Guard, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import make_tp_blocks  # noqa: E402

SOFTMAX = "l0.attn.probs"


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    """A GPT-2-medium-shaped fp16 block (hidden 1024, 512 tokens) planned on 2 devices: a sharded plan."""
    folder = tmp_path_factory.mktemp("check")
    model = make_tp_blocks.build(folder / "model" / "block.onnx", "gpt2", 1024, 16, 4096, 512, 1)
    out = folder / "out"
    proc = run_cli("tile", model, "-d", 2, "-o", out, "--time-limit", 10, "--workers", 1, cwd=folder / "cwd")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert plan["reshardings"] and any(t["layout"] != "R" for t in plan["tensors"])
    return model, out, plan


def tampered(plan: dict, how: str) -> dict:
    plan = json.loads(json.dumps(plan))
    if how == "softmax-on-its-axis":  # probabilities over the keys, split across the devices holding the keys
        op = next(o for o in plan["ops"] if o["name"] == SOFTMAX)
        op["inputs"][0]["layout"] = op["outputs"][0]["layout"] = "S(3)"
    elif how == "missing-resharding":
        plan["reshardings"].pop(0)
    elif how == "op-seconds":
        plan["ops"][0]["seconds"] *= 0.5
    elif how == "tensor-layout":
        plan["tensors"][0]["layout"] = "S(7)"
    elif how == "one-device":
        plan["totals"]["one_device_s"] *= 2
    elif how == "ops-order":
        plan["ops"][0], plan["ops"][1] = plan["ops"][1], plan["ops"][0]
    return plan


CASES = {  # how -> what the one problem line must name
    "softmax-on-its-axis": f"op {SOFTMAX} (Softmax): algorithm",
    "missing-resharding": "is missing from reshardings",
    "op-seconds": "seconds",
    "tensor-layout": "is not among its candidates",
    "one-device": "one-device time",
    "ops-order": "entry 0",
}


@pytest.mark.parametrize("how", list(CASES))
def test_tampered_plans_are_named(solved, how):
    model, out, plan = solved
    loaded = load_costed(Path(model), cost="analytic", device="a100")
    inst = build_layout_instance(loaded.graph, 2, constants=small_constants(loaded.model.model))
    cert = Certificate.from_dict(json.loads((out / "certificate.json").read_text()))
    assert check_plan(inst, plan, cert, loaded.model.sha256)[1] == []
    _, problems = check_plan(inst, tampered(plan, how), cert, loaded.model.sha256)
    assert problems and CASES[how] in " ".join(problems), problems
    if how == "missing-resharding":
        removed = plan["reshardings"][0]
        assert f"op {removed['op'] or '(final gather)'}" in problems[0] and removed["tensor"] in problems[0]


FILES = {  # name -> (plan.json text or None for "leave the good one", certificate from another model?, mention)
    "absent-folder": (None, False, "does not exist"),
    "a-list": ("[]", False, "(top level): expected a mapping, got []"),
    "an-empty-object": ("{}", False, "schema: missing"),
    "wrong-types": ("wrong-types", False, "totals.step_time_s: must be a valid number"),
    "deep-nesting": ("deep", False, "nested too deeply"),
    "another-models-certificate": (None, True, "instance hash differs"),
    "softmax-on-its-axis": ("softmax-on-its-axis", False, f"op {SOFTMAX} (Softmax)"),
}


@pytest.mark.parametrize("name", list(FILES))
def test_bad_folders_exit_2_with_one_line(solved, tmp_path, name):
    model, out, plan = solved
    text, other_model, mention = FILES[name]
    folder = tmp_path / "folder"
    if name != "absent-folder":
        shutil.copytree(out, folder)
    if text == "wrong-types":
        text = json.dumps({**plan, "totals": {**plan["totals"], "step_time_s": "fast"}})
    elif text == "deep":
        text = json.dumps({**plan, "tensors": json.loads("[" * 500 + "]" * 500)})
    elif text == "softmax-on-its-axis":
        text = json.dumps(tampered(plan, text))
    if text is not None:
        (folder / "plan.json").write_text(text)
    if other_model:  # the certificate of the same block with a wider MLP
        other = make_tp_blocks.build(tmp_path / "other" / "block.onnx", "gpt2", 1024, 16, 8192, 512, 1)
        proc = run_cli("tile", other, "-d", 2, "-o", tmp_path / "o", "--time-limit", 5, "--workers", 1,
                       cwd=tmp_path / "cwd0")
        assert proc.returncode == 0, proc.stderr
        shutil.copy(tmp_path / "o" / "certificate.json", folder / "certificate.json")
    guard = Guard(tmp_path / "cwd", (Path(model), *(folder.iterdir() if folder.exists() else ())), folder)
    guard.refused("tile", model, "-d", 2, "--check-certificate", folder, mention=mention)
