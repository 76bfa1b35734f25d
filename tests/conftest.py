"""Shared test fixtures: the onnx wheel's real light models (read from site-packages, never copied) and
the small hand-made models in fixtures/."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import onnx
import pytest

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(p.name[len("light_"):-len(".onnx")] for p in LIGHT_DIR.glob("light_*.onnx"))
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


#: The files that take longest under ``make test`` (10-40 s each on 2 cores), longest first.
LONGEST_FIRST = ("tests/sweep/test_sweep_ray.py", "tests/sweep/test_sweep_local.py", "tests/test_real_exports.py",
                 "tests/schedule/latency/test_barrier.py", "tests/test_scale.py", "tests/safety/test_signals.py",
                 "tests/partition/test_partition_cli.py", "tests/tile/onnx/test_scale.py",
                 "tests/safety/test_check_certificate.py", "tests/schedule/test_cli_schedule.py",
                 "tests/schedule/latency/test_module_bounds.py", "tests/remat/test_cli_remat.py",
                 "tests/schedule/test_scale.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files in :data:`LONGEST_FIRST`'s order, then the others by their number of tests, most first, each
    file's tests in their own order. ``make test`` gives each file to one of two workers (``--dist
    loadfile --no-loadscope-reorder``) in this order: a long file started last would keep one worker
    busy while the other has nothing left (xdist's own order, by number of tests, put the 20,000-op and
    sweep files last)."""
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    count = Counter(_file(item) for item in items)
    items.sort(key=lambda item: (rank.get(_file(item), len(rank)), -count[_file(item)], _file(item)))


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def light(name: str) -> Path:
    return LIGHT_DIR / f"light_{name}.onnx"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


#: Tests that read the benchmark instances in ../shared/benchmarks (present beside every checkout in CI;
#: absent in a bare clone elsewhere, where these tests are skipped with this reason).
requires_shared = pytest.mark.skipif(not (SHARED / "benchmarks").is_dir(),
                                     reason="../shared/benchmarks is not beside this checkout")


@pytest.fixture(autouse=True)
def onnx_files_pass_full_check(request):
    """Every ``.onnx`` a test leaves in its ``tmp_path`` passes ``onnx.checker.check_model(path,
    full_check=True)`` (strict shape inference included): an emitted file ONNX's own checker refuses is
    a bug. Tests that build invalid models on purpose opt out with ``@pytest.mark.invalid_onnx``."""
    if "tmp_path" not in request.fixturenames or request.node.get_closest_marker("invalid_onnx"):
        yield
        return
    folder = request.getfixturevalue("tmp_path")
    yield
    for path in sorted(folder.rglob("*.onnx")):
        try:
            onnx.checker.check_model(str(path), full_check=True)
        except Exception as exc:  # noqa: BLE001 - every checker error names the file
            pytest.fail(f"{path.relative_to(folder)} fails onnx.checker full_check: {exc}", pytrace=False)
