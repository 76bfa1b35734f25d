"""solvers.to_integers: the one float → integer scaling of solver data."""

import numpy as np
import pytest

from onnxpart.solvers import to_integers


def test_down_never_exceeds_and_up_never_falls_short():
    values = np.random.default_rng(0).random(200) * 1e3
    down, scale = to_integers(values, 2 ** 20, "down", margin=1e-12)
    up, same = to_integers(values, 2 ** 20, "up", margin=1e-12)
    assert scale == same == 2 ** 20 / values.sum()
    assert (down <= values * scale).all() and (up >= values * scale).all() and (up - down <= 1).all()
    assert down.dtype == np.int64


def test_unit_grid_and_degenerate_totals():
    ints, scale = to_integers([0.5, 1.0, 2.75], unit=0.25)
    assert ints.tolist() == [2, 4, 11] and scale == 4.0
    ints, scale = to_integers([0.0, 0.0], 2 ** 30)
    assert ints.tolist() == [0, 0] and scale == 1.0
    with pytest.raises(ValueError, match="rounding"):
        to_integers([1.0], 10, "nearest")
