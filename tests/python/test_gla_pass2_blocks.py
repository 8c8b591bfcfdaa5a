"""tools/precision/gla_pass2_blocks.py: the GLA pass 2 kernel's block decomposition equals autograd."""

import importlib.util
import pathlib

import pytest

torch = pytest.importorskip("torch")

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "precision" / "gla_pass2_blocks.py"
_spec = importlib.util.spec_from_file_location("gla_pass2_blocks", _PATH)
blocks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blocks)


@pytest.mark.parametrize("Lc", [64, 50, 17, 1])
def test_decomposition_matches_autograd(Lc):
    gen = torch.Generator().manual_seed(Lc)
    errs = blocks.chunk(Lc, 0.3, gen)
    assert max(errs) < 1e-12, errs


def test_a_wrong_decomposition_is_caught():
    # without the diagonal blocks the same check reports O(1) errors
    errs = blocks.chunk(64, 0.3, torch.Generator().manual_seed(0), skip_diag=True)
    assert min(errs) > 1e-3, errs
