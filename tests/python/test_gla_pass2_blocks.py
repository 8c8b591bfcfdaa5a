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
@pytest.mark.parametrize("force_wide,steep", [(0.0, False), (0.3, False), (0.0, True)])
def test_decomposition_matches_autograd(Lc, force_wide, steep):
    gen = torch.Generator().manual_seed(Lc)
    errs = blocks.chunk(Lc, 0.3, gen, force_wide, steep)
    assert max(errs) < 1e-12, errs


def test_a_wrong_decomposition_is_caught():
    # every diagonal block sent to the exact path, which is then left out: O(1) errors
    errs = blocks.chunk(64, 0.3, torch.Generator().manual_seed(0), force_wide=1.0, skip_exact=True)
    assert min(errs) > 1e-3, errs
