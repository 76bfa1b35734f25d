"""Grids into jobs: option spellings, cartesian products, sweep files, and the job keys --resume matches."""

from __future__ import annotations

import shutil

import onnx
import pytest
import typer.main

from onnxpart.cli.app import app
from onnxpart.errors import UserError
from onnxpart.sweep.commands import Commands
from onnxpart.sweep.grid import Settings, expand, expand_models, parse_strategy_spec
from onnxpart.sweep.sweep_file import read_sweep_file
from tests.conftest import FIXTURES

DIAMOND = FIXTURES / "diamond.onnx"
SYSTEM = FIXTURES / "systems" / "cpu_t4_a100.yaml"
COMMANDS = Commands(typer.main.get_command(app))  # the strategy commands, as the sweep command hands them in


def jobs_of(specs: dict[str, list[str]], models=(DIAMOND,), version="1.0", settings=Settings(), base=FIXTURES):
    grids = [parse_strategy_spec(name, text, COMMANDS) for name, texts in specs.items() for text in texts]
    return expand(expand_models([str(m) for m in models], base), grids, settings, base, version, COMMANDS)


def test_a_spec_is_the_cartesian_product_of_its_options_values():
    jobs = jobs_of({"partition": ["k=2,4 bounds=simple,exact"]})
    assert [(j.options["stages"], j.options["bounds"]) for j in jobs] == [
        ("2", "simple"), ("2", "exact"), ("4", "simple"), ("4", "exact")]
    first = jobs[0]
    assert first.argv == ("--time-limit", "60", "--workers", "1", "--seed", "0", "--stages", "2", "--bounds", "simple")
    assert first.name == "diamond-partition-k=2-bounds=simple" and first.axis == {"stages": "2", "bounds": "simple"}
    assert len({j.key for j in jobs}) == 4 and len({j.name for j in jobs}) == 4


def test_flags_and_repeatable_options():
    jobs = jobs_of({"partition": ["k=2 mla=false verify dim=a=1 dim=b=2,b=3"]})
    assert [j.options["dim"] for j in jobs] == [["a=1", "b=2"], ["a=1", "b=3"]]
    assert "--no-mla" in jobs[0].argv and "--verify" in jobs[0].argv
    assert jobs[0].argv[-4:] == ("--dim", "a=1", "--dim", "b=2")


def test_job_keys_follow_what_decides_the_result(tmp_path):
    """The key is the same however an option is spelled, and changes with the model's bytes, any option,
    a file option's content and the onnxpart version."""
    key = jobs_of({"partition": ["k=2"]})[0].key
    assert jobs_of({"partition": ["stages=2"]})[0].key == key
    assert jobs_of({"partition": ["--stages=2"]})[0].key == key
    assert jobs_of({"partition": ["k=3"]})[0].key != key
    assert jobs_of({"partition": ["k=2 seed=1"]})[0].key != key
    assert jobs_of({"partition": ["k=2"]}, version="1.1")[0].key != key
    copy = tmp_path / "diamond.onnx"
    shutil.copy(DIAMOND, copy)
    assert jobs_of({"partition": ["k=2"]}, models=(copy,))[0].key == key  # same bytes, another path
    _save_with_doc(copy, "edited")
    assert jobs_of({"partition": ["k=2"]}, models=(copy,))[0].key != key

    system = tmp_path / "system.yaml"
    shutil.copy(SYSTEM, system)
    before = jobs_of({"schedule": [f"system={system}"]})[0]
    assert before.argv[-2:] == ("--system", str(system))
    system.write_text(system.read_text() + "\n# edited\n")
    assert jobs_of({"schedule": [f"system={system}"]})[0].key != before.key


@pytest.mark.parametrize("spec, mention", [
    ("kk=2", "partition has no option 'kk'"),
    ("k=abc", "--stages"),
    ("k=", "k has no values"),
    ("k=2 output=x", "no option 'output'"),    # the sweep sets -o itself
    ("k=2 json", "no option 'json'"),
    ("k=2 verify=maybe", "is a flag"),
    ("k=2 system=missing.yaml", "no option 'system'"),
])
def test_bad_specs_are_one_error_before_any_job(spec, mention):
    with pytest.raises(UserError, match=None) as caught:
        jobs_of({"partition": [spec]})
    assert mention in str(caught.value)


def test_a_missing_file_option_is_refused():
    with pytest.raises(UserError, match="does not exist"):
        jobs_of({"schedule": ["system=missing.yaml"]})


def test_no_strategy_and_unknown_strategy():
    with pytest.raises(UserError, match="no strategies"):
        jobs_of({})
    with pytest.raises(UserError, match="unknown strategy"):
        parse_strategy_spec("inspect", "top=3", COMMANDS)


def test_annotate_jobs_take_only_the_options_annotate_has():
    (job,) = jobs_of({"annotate": ["cost=measured runs=1"]})
    assert job.argv == ("--cost", "measured", "--runs", "1") and job.workers == 1
    assert job.name == "diamond-annotate-cost=measured-runs=1"


def test_models_with_one_stem_get_distinct_names(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        _save_with_doc(tmp_path / folder / "m.onnx", folder)
    jobs = jobs_of({"partition": ["k=2"]}, models=(tmp_path / "a" / "m.onnx", tmp_path / "b" / "m.onnx"))
    assert len({j.name for j in jobs}) == 2 and all(j.name.startswith("m-partition-k=2-") for j in jobs)


def test_globs_expand_sorted_relative_to_the_base(tmp_path):
    for name in ("b.onnx", "a.onnx"):
        shutil.copy(DIAMOND, tmp_path / name)
    models = expand_models(["*.onnx"], tmp_path)
    assert [m.shown for m in models] == ["a.onnx", "b.onnx"]
    with pytest.raises(UserError, match="no model matches"):
        expand_models(["*.nothing"], tmp_path)


def test_a_sweep_file_gives_the_same_jobs_as_the_command_line(tmp_path):
    shutil.copy(DIAMOND, tmp_path / "diamond.onnx")
    shutil.copy(SYSTEM, tmp_path / "system.yaml")
    (tmp_path / "sweep.yaml").write_text(
        "models: [diamond.onnx]\ntime_limit: 2\n"
        "partition: {k: [2, 4], bounds: simple}\n"
        "schedule:\n  - {system: system.yaml, resources: {a100: 1}}\n")
    read = read_sweep_file(tmp_path / "sweep.yaml", COMMANDS)
    from_file = expand(read.models, read.grids, read.settings(None, None, None), tmp_path, "1.0", COMMANDS)
    from_cli = jobs_of({"partition": ["k=2,4 bounds=simple"], "schedule": [f"system={tmp_path / 'system.yaml'}"]},
                       models=(tmp_path / "diamond.onnx",), settings=Settings(time_limit=2), base=tmp_path)
    assert [j.key for j in from_file] == [j.key for j in from_cli]
    assert from_file[-1].resources == {"a100": 1.0} and from_cli[-1].resources == {}
    assert read.settings(5.0, None, None).time_limit == 5.0  # the command line wins


@pytest.mark.parametrize("text, mention", [
    ("models: []\npartition: {k: 2}\n", "models (line 1): List should have at least 1 item"),
    ("models: [diamond.onnx]\npartitoin:\n  k: 2\n", "partitoin (line 2): unknown key"),
    ("models: [diamond.onnx]\npartition:\n  k: {a: 1}\n", "partition.k (line 3): expected a value"),
    ("models: [{pth: diamond.onnx}]\n", "models[0] (line 1): expected a model path"),
    ("models: [diamond.onnx]\ntime_limit: -1\n", "time_limit (line 2)"),
    ("models: [diamond.onnx\n", "not valid YAML"),
])
def test_sweep_file_errors_name_the_key_and_line(tmp_path, text, mention):
    shutil.copy(DIAMOND, tmp_path / "diamond.onnx")
    (tmp_path / "sweep.yaml").write_text(text)
    with pytest.raises(UserError) as caught:
        read_sweep_file(tmp_path / "sweep.yaml", COMMANDS)
    assert mention in str(caught.value) and "sweep.yaml" in str(caught.value)


def test_model_options_in_a_sweep_file_reach_every_job(tmp_path):
    shutil.copy(FIXTURES / "symbolic.onnx", tmp_path / "symbolic.onnx")
    (tmp_path / "sweep.yaml").write_text("models:\n  - {path: symbolic.onnx, dim: [batch=2]}\n"
                                         "remat: {budget: [80%, 90%]}\n")
    read = read_sweep_file(tmp_path / "sweep.yaml", COMMANDS)
    jobs = expand(read.models, read.grids, Settings(), tmp_path, "1.0", COMMANDS)
    assert [j.options["dim"] for j in jobs] == [["batch=2"], ["batch=2"]]
    assert all(("--dim", "batch=2") == j.argv[6:8] for j in jobs)


def _save_with_doc(path, doc: str) -> None:
    """The diamond with another doc string: a valid model whose bytes differ."""
    model = onnx.load(str(DIAMOND))
    model.doc_string = doc
    onnx.save(model, str(path))
