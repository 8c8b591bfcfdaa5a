"""pytest configuration of the Python tests."""

import os

# The test shapes are tiny: OpenMP worker threads only add contention (and on a busy 2-core
# machine, spin-waits that slow gradcheck tenfold). Set before the extension loads libgomp;
# an explicit OMP_NUM_THREADS from the environment wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)
