"""Export small random-weight Hugging Face transformers to ONNX, to test onnxpart's loader on real exporter output.

Optional, and run only in a separate env that has torch (CPU), transformers, onnx, onnxscript and onnxruntime, e.g.
``/tmp/torchenv/bin/python scripts/export_real_models.py /work/exports`` -- onnxpart and its tests never import torch.

Usage: ``python scripts/export_real_models.py OUT_DIR [--only NAME ...]``; NAME is one of bert, distilbert, gpt2,
llama, llama-kv, t5-encoder, vit. Every model is built from a config (hidden 64, 2 layers, vocab 1000) with seeded
random weights, so nothing is downloaded (HF_HUB_OFFLINE=1). Each model gives up to three files:

- ``NAME-legacy-static.onnx``   TorchScript exporter (dynamo=False), opset 17, fixed shapes (batch 1, sequence 16)
- ``NAME-legacy-dynamic.onnx``  the same with dynamic_axes (``batch``, ``sequence``, ``past_sequence_length``, ...)
- ``NAME-dynamo.onnx``          torch.export-based exporter (dynamo=True), opset 18, torch.export.Dim dynamic shapes;
                                if those fail it retries with static shapes and records why

Each file is checked with ``onnx.checker.check_model`` and run in onnxruntime (CPU) at the export shape (compared
with torch), and dynamic variants also at two other (batch, sequence) sizes. ``OUT_DIR/manifest.json`` lists, per
file, the architecture, exporter, opset, input/output signatures (dims as ints or dim_param names), the
onnxruntime results and any error; variants that failed to export appear with ``"exported": false``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch.export import Dim  # noqa: E402

VOCAB = 1000
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
FFN = 128
MAX_POS = 128
IMAGE = 32
PATCH = 8
LEGACY_OPSET = 17
DYNAMO_OPSET = 18


@dataclass(frozen=True)
class Shape:
    """One input size: batch, sequence length and (KV-cache models only) past sequence length."""

    batch: int
    seq: int
    past: int = 0

    def label(self, axes: str) -> str:
        """A short name for the manifest, e.g. ``b2_s9_p5``, of the axes ("b", "s", "p") the model uses."""
        values = {"b": self.batch, "s": self.seq, "p": self.past}
        return "_".join(f"{axis}{values[axis]}" for axis in axes)


STATIC_SHAPE = Shape(1, 16, 8)
DYNAMO_SHAPE = Shape(2, 16, 8)  # torch.export specializes dims whose example size is 0 or 1, so trace at batch 2
OTHER_SHAPES = (Shape(2, 9, 5), Shape(1, 23, 12))


@dataclass
class ModelSpec:
    """How to build, feed and describe one architecture."""

    name: str
    architecture: str
    build: Callable[[], torch.nn.Module]
    make_inputs: Callable[[Shape], dict[str, torch.Tensor]]  # ONNX input name -> tensor, in forward() order
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]  # legacy exporter, inputs and outputs
    dynamo_dims: Callable[[], dict[str, dict[int, Dim]]] = field(default=lambda: {})  # inputs only
    shape_axes: str = "bs"  # which of batch (b), sequence (s) and past (p) the inputs depend on


class TupleOutputs(torch.nn.Module):
    """Calls a Hugging Face model with positional tensors bound to keyword names; returns a tuple of tensors."""

    def __init__(self, model: torch.nn.Module, input_names: list[str], output_keys: list[str]):
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.output_keys = output_keys

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run the wrapped model and pick ``output_keys`` from its ModelOutput."""
        out = self.model(**dict(zip(self.input_names, args)))
        return tuple(out[key] for key in self.output_keys)


class LlamaWithFlatCache(torch.nn.Module):
    """A decoder step with the KV cache as flat tensors: (ids, mask, positions, k0, v0, k1, v1, ...) -> (logits, k0', ...)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Rebuild a DynamicCache from ``past``, run one step, and flatten the updated cache into the outputs."""
        cache = transformers.DynamicCache(ddp_cache_data=[(past[i], past[i + 1]) for i in range(0, len(past), 2)])
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def _ids(shape: Shape, seed: int = 1) -> torch.Tensor:
    """Seeded token ids of shape (batch, seq)."""
    return torch.randint(0, VOCAB, (shape.batch, shape.seq), generator=torch.Generator().manual_seed(seed))


def _text_inputs(shape: Shape, token_types: bool = False) -> dict[str, torch.Tensor]:
    """input_ids, an all-ones attention_mask and optionally zero token_type_ids."""
    ids = _ids(shape)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if token_types:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return inputs


def _text_axes(inputs: list[str], outputs: list[str]) -> dict[str, dict[int, str]]:
    """dynamic_axes with (batch, sequence) on every input and output."""
    return {name: {0: "batch", 1: "sequence"} for name in inputs + outputs}


def _text_dims(inputs: list[str]) -> Callable[[], dict[str, dict[int, Dim]]]:
    """torch.export dims with (batch, sequence) on every input."""
    def dims() -> dict[str, dict[int, Dim]]:
        batch, seq = Dim("batch", min=1, max=64), Dim("sequence", min=1, max=MAX_POS - 32)
        return {name: {0: batch, 1: seq} for name in inputs}
    return dims


def _eval(model: torch.nn.Module) -> torch.nn.Module:
    """Switch to eval mode and freeze the weights."""
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def _text_spec(name: str, arch: str, model_fn: Callable[[], torch.nn.Module], inputs: list[str],
               outputs: list[str]) -> ModelSpec:
    """A spec for an encoder or decoder that takes (batch, sequence) token tensors."""
    token_types = "token_type_ids" in inputs
    return ModelSpec(
        name=name, architecture=arch,
        build=lambda: TupleOutputs(_eval(model_fn()), inputs, outputs),
        make_inputs=lambda shape: _text_inputs(shape, token_types),
        output_names=outputs,
        dynamic_axes=_text_axes(inputs, outputs[:1]) | {o: {0: "batch"} for o in outputs[1:]},
        dynamo_dims=_text_dims(inputs),
    )


def _llama_config() -> transformers.LlamaConfig:
    """A 2-layer Llama with grouped-query attention (4 query heads, 2 KV heads)."""
    return transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_POS,
        attn_implementation="eager", use_cache=False)


def _kv_names() -> tuple[list[str], list[str]]:
    """past_key_values.{i}.key/value input names and present.{i}.key/value output names."""
    past = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    return past, [p.replace("past_key_values", "present") for p in past]


def _llama_kv_inputs(shape: Shape) -> dict[str, torch.Tensor]:
    """One decoding step of ``shape.seq`` new tokens after ``shape.past`` cached ones."""
    gen = torch.Generator().manual_seed(2)
    total = shape.past + shape.seq
    inputs = {"input_ids": _ids(shape),
              "attention_mask": torch.ones(shape.batch, total, dtype=torch.int64),
              "position_ids": torch.arange(shape.past, total).unsqueeze(0).expand(shape.batch, -1).contiguous()}
    head_dim = HIDDEN // HEADS
    for name in _kv_names()[0]:
        inputs[name] = torch.randn(shape.batch, KV_HEADS, shape.past, head_dim, generator=gen)
    return inputs


def _llama_kv_dims() -> dict[str, dict[int, Dim]]:
    """torch.export dims for the KV-cache Llama; the mask length is its own dim (past + sequence)."""
    batch, seq = Dim("batch", min=1, max=64), Dim("sequence", min=1, max=32)
    past = Dim("past_sequence_length", min=1, max=64)
    dims = {"input_ids": {0: batch, 1: seq}, "position_ids": {0: batch, 1: seq},
            "attention_mask": {0: batch, 1: Dim("total_sequence_length", min=2, max=96)}}
    return dims | {name: {0: batch, 2: past} for name in _kv_names()[0]}


def _llama_kv_spec() -> ModelSpec:
    """Llama with past_key_values.* inputs and present.* outputs."""
    past, present = _kv_names()
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "position_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "total_sequence_length"}, "logits": {0: "batch", 1: "sequence"}}
    axes |= {name: {0: "batch", 2: "past_sequence_length"} for name in past}
    axes |= {name: {0: "batch", 2: "total_sequence_length"} for name in present}
    return ModelSpec(
        name="llama-kv", architecture="LlamaForCausalLM (with KV cache)",
        build=lambda: LlamaWithFlatCache(_eval(transformers.LlamaForCausalLM(_llama_config()))),
        make_inputs=_llama_kv_inputs, output_names=["logits", *present],
        dynamic_axes=axes, dynamo_dims=_llama_kv_dims, shape_axes="bsp")


def _vit_spec() -> ModelSpec:
    """ViT on 32x32 images in 8x8 patches; only the batch is dynamic."""
    config = transformers.ViTConfig(image_size=IMAGE, patch_size=PATCH, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                    num_attention_heads=HEADS, intermediate_size=FFN, attn_implementation="eager")
    outputs = ["last_hidden_state", "pooler_output"]

    def make_inputs(shape: Shape) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(3)
        return {"pixel_values": torch.randn(shape.batch, 3, IMAGE, IMAGE, generator=gen)}

    return ModelSpec(
        name="vit", architecture="ViTModel",
        build=lambda: TupleOutputs(_eval(transformers.ViTModel(config)), ["pixel_values"], outputs),
        make_inputs=make_inputs, output_names=outputs,
        dynamic_axes={name: {0: "batch"} for name in ["pixel_values", *outputs]},
        dynamo_dims=lambda: {"pixel_values": {0: Dim("batch", min=1, max=64)}}, shape_axes="b")


def model_specs() -> dict[str, ModelSpec]:
    """Every architecture this script exports, by NAME."""
    t = transformers
    bert = t.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=FFN, max_position_embeddings=MAX_POS, attn_implementation="eager")
    distil = t.DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
                                max_position_embeddings=MAX_POS, attn_implementation="eager")
    gpt2 = t.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=MAX_POS,
                        bos_token_id=0, eos_token_id=0, use_cache=False, attn_implementation="eager")
    t5 = t.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS,
                    num_heads=HEADS, relative_attention_num_buckets=32, use_cache=False, attn_implementation="eager")
    text = ["input_ids", "attention_mask"]
    specs = [
        _text_spec("bert", "BertModel", lambda: t.BertModel(bert), [*text, "token_type_ids"],
                   ["last_hidden_state", "pooler_output"]),
        _text_spec("distilbert", "DistilBertModel", lambda: t.DistilBertModel(distil), text, ["last_hidden_state"]),
        _text_spec("gpt2", "GPT2LMHeadModel", lambda: t.GPT2LMHeadModel(gpt2), text, ["logits"]),
        _text_spec("llama", "LlamaForCausalLM (no KV cache)", lambda: t.LlamaForCausalLM(_llama_config()), text,
                   ["logits"]),
        _llama_kv_spec(),
        _text_spec("t5-encoder", "T5EncoderModel", lambda: t.T5EncoderModel(t5), text, ["last_hidden_state"]),
        _vit_spec(),
    ]
    return {spec.name: spec for spec in specs}


def short_error(exc: BaseException) -> str:
    """``Type: first non-empty line of the message``, at most 300 characters."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip() and "This is step" not in line]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def export_legacy(spec: ModelSpec, path: Path, dynamic: bool) -> None:
    """TorchScript-based export (dynamo=False) at STATIC_SHAPE, with or without dynamic_axes."""
    torch.manual_seed(0)
    model = spec.build()
    inputs = spec.make_inputs(STATIC_SHAPE)
    torch.onnx.export(
        model, tuple(inputs.values()), str(path), dynamo=False, opset_version=LEGACY_OPSET,
        input_names=list(inputs), output_names=spec.output_names,
        dynamic_axes=spec.dynamic_axes if dynamic else None, do_constant_folding=True)


def nest_dims(model: torch.nn.Module, names: list[str], dims: dict[str, dict[int, Dim]]) -> tuple:
    """Arrange per-input dims like ``model.forward``'s parameters: one entry each, a tuple for ``*args``."""
    flat = [dims.get(name) for name in names]
    nested: list = []
    for param in inspect.signature(model.forward).parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            nested.append(tuple(flat[len(nested):]))
            break
        nested.append(flat[len(nested)])
    return tuple(nested)


def export_dynamo(spec: ModelSpec, path: Path) -> str | None:
    """torch.export-based export (dynamo=True); returns why dynamic shapes failed if it fell back to static ones."""
    inputs = spec.make_inputs(DYNAMO_SHAPE)
    dims = spec.dynamo_dims()
    fallback = None
    for dynamic in ([True, False] if dims else [False]):
        torch.manual_seed(0)
        model = spec.build()
        dynamic_shapes = nest_dims(model, list(inputs), dims) if dynamic else None
        try:
            program = torch.onnx.export(
                model, tuple(inputs.values()), dynamo=True, opset_version=DYNAMO_OPSET,
                input_names=list(inputs), output_names=spec.output_names, dynamic_shapes=dynamic_shapes,
                external_data=False, optimize=True)
            program.save(str(path), external_data=False)
            return fallback
        except Exception as exc:  # noqa: BLE001 - any exporter failure is recorded, then static shapes are tried
            if not dynamic:
                raise
            fallback = f"dynamic shapes failed, exported static: {short_error(exc)}"
    return fallback


def describe(values) -> list[dict]:
    """Name, element type and dims (int, dim_param string or null) of graph inputs or outputs."""
    rows = []
    for value in values:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
        rows.append({"name": value.name, "dtype": onnx.TensorProto.DataType.Name(tensor.elem_type).lower(),
                     "dims": dims})
    return rows


def run_ort(spec: ModelSpec, path: Path, shape: Shape, reference: bool) -> dict:
    """Run the file once in onnxruntime at ``shape``; with ``reference``, compare the first output with torch."""
    inputs = spec.make_inputs(shape)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    wanted = [i.name for i in session.get_inputs()]
    missing = [name for name in wanted if name not in inputs]
    if missing:
        raise KeyError(f"model wants inputs this script does not make: {missing}")
    outputs = session.run(None, {name: inputs[name].numpy() for name in wanted})
    result = {"ok": True, "output_shapes": [list(o.shape) for o in outputs]}
    if reference:
        torch.manual_seed(0)
        with torch.no_grad():
            expected = spec.build()(*inputs.values())[0].numpy()
        result["max_abs_diff_vs_torch"] = float(np.max(np.abs(expected - outputs[0])))
    return result


def check_file(spec: ModelSpec, path: Path, export_shape: Shape, dynamic: bool) -> dict:
    """onnx.checker plus onnxruntime runs; records signatures and per-shape results."""
    model = onnx.load(str(path), load_external_data=False)
    entry = {"opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
             "inputs": describe(model.graph.input), "outputs": describe(model.graph.output),
             "size_bytes": path.stat().st_size, "checker": "ok", "ort": {}}
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:  # noqa: BLE001
        entry["checker"] = short_error(exc)
    shapes = {}  # label -> Shape; shapes that differ only in axes the model ignores (ViT: sequence) run once
    for shape in [export_shape, *(OTHER_SHAPES if dynamic else ())]:
        shapes.setdefault(shape.label(spec.shape_axes), shape)
    for i, (label, shape) in enumerate(shapes.items()):
        try:
            entry["ort"][label] = run_ort(spec, path, shape, reference=i == 0)
        except Exception as exc:  # noqa: BLE001
            entry["ort"][label] = {"ok": False, "error": short_error(exc)}
    results = list(entry["ort"].values())
    entry["ort_ran_export_shape"] = results[0]["ok"]
    entry["ort_ran_all_sizes"] = all(r["ok"] for r in results)
    return entry


def export_variant(spec: ModelSpec, out_dir: Path, variant: str) -> dict:
    """Export one variant of ``spec`` and check it; failures are returned as manifest entries, never raised."""
    path = out_dir / f"{spec.name}-{variant}.onnx"
    entry = {"file": path.name, "model": spec.name, "architecture": spec.architecture, "variant": variant,
             "exporter": "dynamo" if variant == "dynamo" else "torchscript", "exported": False, "error": None}
    path.unlink(missing_ok=True)
    try:
        if variant == "dynamo":
            note = export_dynamo(spec, path)
            entry["dynamic"] = note is None and bool(spec.dynamo_dims())
            entry["note"] = note
            shape = DYNAMO_SHAPE
        else:
            export_legacy(spec, path, dynamic=variant == "legacy-dynamic")
            entry["dynamic"] = variant == "legacy-dynamic"
            shape = STATIC_SHAPE
    except Exception as exc:  # noqa: BLE001 - record and carry on with the next variant
        entry["error"] = short_error(exc)
        entry["traceback_tail"] = traceback.format_exc().splitlines()[-6:]
        path.unlink(missing_ok=True)
        return entry
    entry["exported"] = True
    entry |= check_file(spec, path, shape, entry["dynamic"])
    return entry


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, export every requested model and write OUT_DIR/manifest.json."""
    specs = model_specs()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--only", nargs="+", choices=sorted(specs), metavar="NAME", help=", ".join(specs))
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                            "onnx": onnx.__version__, "onnxruntime": ort.__version__}
    files = manifest.setdefault("files", {})
    for name in args.only or specs:
        for variant in ("legacy-static", "legacy-dynamic", "dynamo"):
            entry = export_variant(specs[name], args.out_dir, variant)
            files[entry["file"]] = entry
            status = "ok" if entry["exported"] and entry["ort_ran_all_sizes"] else "FAILED"
            print(f"{entry['file']:32} {status:6} {entry['error'] or entry.get('note') or ''}", flush=True)
    manifest["files"] = dict(sorted(files.items()))
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
