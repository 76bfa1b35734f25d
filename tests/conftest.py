"""Shared test fixtures: the onnx wheel's real light models (read from site-packages, never copied) and
the small hand-made models in fixtures/."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(p.name[len("light_"):-len(".onnx")] for p in LIGHT_DIR.glob("light_*.onnx"))
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


def light(name: str) -> Path:
    return LIGHT_DIR / f"light_{name}.onnx"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


#: Tests that read the benchmark instances in ../shared/benchmarks (present beside every checkout in CI;
#: absent in a bare clone elsewhere, where these tests are skipped with this reason).
requires_shared = pytest.mark.skipif(not (SHARED / "benchmarks").is_dir(),
                                     reason="../shared/benchmarks is not beside this checkout")
