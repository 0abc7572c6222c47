"""Shared fixtures: the stories260K model (a missing file fails, never skips) and a mock model's
keys whose deeper layers are more concentrated (the reference library's benchmark)."""
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_PATH = ROOT.parent / "shared" / "models" / "stories260K.gguf"
TEXT_PATH = ROOT.parent / "shared" / "data" / "tinystories_val.txt"


@pytest.fixture(scope="session")
def model():
    import squeezekv  # here, so that the tests of scripts/ run without the built module

    assert MODEL_PATH.is_file(), f"missing test model {MODEL_PATH}"
    return squeezekv.Model.load(MODEL_PATH)


def mock_layer_keys(rng, layer, n_layers, batch=1, heads=2, seq=64, head_dim=16):
    """Gaussian keys mixed with one shared direction by layer / (n_layers - 1)."""
    frac = layer / max(n_layers - 1, 1)
    noise = rng.standard_normal((batch, heads, seq, head_dim))
    direction = np.zeros(head_dim)
    direction[0] = 1.0
    return ((1.0 - frac) * noise + frac * 4.0 * direction).astype(np.float32)


def artifact(variable, default):
    """A build product the agreement tests drive (the C++ program, the shared library)."""
    path = pathlib.Path(os.environ.get(variable, ROOT / "build" / default))
    assert path.is_file(), f"{path} not built (set {variable})"
    return path
