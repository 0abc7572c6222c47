"""Sliding-window layers from Python: each holds its window, the method schedules the global layers
alone, the accounting keeps the two apart, and bad windows are refused naming the argument."""
import numpy as np
import pytest

import squeezekv
from conftest import mock_layer_keys

N_LAYERS, HEADS, D, PREFILL, BUDGET, W = 6, 2, 16, 96, 24, 10
WINDOWS = [W, 0, W, 0, W, 0]


def run(config, windows=WINDOWS, decode=8):
    rng = np.random.default_rng(3)
    caches = squeezekv.KVCacheBuilder.for_model(N_LAYERS, config, sliding_windows=windows)
    for layer, cache in enumerate(caches):
        keys = mock_layer_keys(rng, layer, N_LAYERS, heads=HEADS, seq=PREFILL, head_dim=D)
        cache.update_and_fetch(keys, rng.standard_normal(keys.shape).astype(np.float32))
    for _ in range(decode):
        for layer, cache in enumerate(caches):
            keys = mock_layer_keys(rng, layer, N_LAYERS, heads=HEADS, seq=1, head_dim=D)
            cache.update_and_fetch(keys, rng.standard_normal(keys.shape).astype(np.float32))
    return caches


@pytest.mark.parametrize("method", ["squeeze", "h2o", "pyramidkv", "full", "tova", "streaming"])
def test_sliding_layers_hold_their_window_and_the_budget_is_the_global_layers_average(method):
    caches = run(squeezekv.KVCacheConfig(method=method, head_dim=D, squeeze_budget=BUDGET))
    assert caches.sliding_windows == WINDOWS
    seen = PREFILL + 8
    for layer, window in zip(caches, WINDOWS):
        assert layer.sliding_window == window
        if window:
            _, _, positions = layer.fetch()
            assert (positions == np.arange(seen - W, seen)).all()
            assert layer.layer_budget == W and layer.tokens_kept == W
            assert layer.full_bytes == 2 * HEADS * W * D * 2  # K and V, fp16: the window
    global_budgets = [b for b, w in zip(caches.budgets, WINDOWS) if not w]
    if method != "full":
        assert sum(global_budgets) == 3 * BUDGET
    else:
        assert all(layer.tokens_kept == seen for layer, w in zip(caches, WINDOWS) if not w)
    assert caches.sliding_kept_bytes + caches.evicting_kept_bytes == caches.kept_bytes
    assert caches.sliding_kept_bytes == sum(c.kept_bytes for c, w in zip(caches, WINDOWS) if w)
    assert caches.sliding_kept_bytes > 0 and caches.evicting_kept_bytes > 0


def test_squeeze_schedule_ignores_the_sliding_layers():
    caches = run(squeezekv.KVCacheConfig(method="squeeze", head_dim=D, squeeze_budget=BUDGET))
    measured = [c for c, w in zip(caches.concentrations, WINDOWS) if not w]
    assert all(c == 0.0 for c, w in zip(caches.concentrations, WINDOWS) if w)
    assert [b for b, w in zip(caches.budgets, WINDOWS) if not w] == squeezekv.squeeze_budgets(measured, BUDGET, 4, 1.0)


def test_the_native_cache_reports_its_kinds():
    config = squeezekv.KVCacheConfig(head_dim=D).to_native()
    native = squeezekv._native.ModelCache(config, 3, 1, 1, [0, 7, 0])
    assert native.sliding_windows == [0, 7, 0]
    assert [native.layer(i).sliding_window for i in range(3)] == [0, 7, 0]
    assert squeezekv._native.ModelCache(config, 2).sliding_windows == [0, 0]


@pytest.mark.parametrize("windows, message", [
    ([W, 0], "sliding_windows has 2 entries: must equal n_layers = 6"),
    ([W, 0, -1, 0, W, 0], "sliding_windows[2] = -1"),
    ([W, 0, 2.5, 0, W, 0], "sliding_windows[2] = 2.5"),
])
def test_bad_windows_name_the_argument(windows, message):
    with pytest.raises(ValueError) as e:
        squeezekv.KVCacheBuilder.for_model(N_LAYERS, squeezekv.KVCacheConfig(head_dim=D), sliding_windows=windows)
    assert message in str(e.value)


def test_the_native_cache_checks_the_windows_too():
    config = squeezekv.KVCacheConfig(head_dim=D).to_native()
    with pytest.raises(ValueError, match=r"sliding_windows.size\(\) = 2: must equal n_layers = 3"):
        squeezekv._native.ModelCache(config, 3, 1, 1, [0, 7])
    with pytest.raises(ValueError, match=r"sliding_windows\[1\] = -7"):
        squeezekv._native.ModelCache(config, 3, 1, 1, [0, -7, 0])


def test_a_lone_sliding_layer():
    cache = squeezekv.KVCacheFactory.create(squeezekv.KVCacheConfig(method="h2o", head_dim=D), sliding_window=5)
    rng = np.random.default_rng(1)
    for _ in range(3):
        keys = rng.standard_normal((1, HEADS, 4, D)).astype(np.float32)
        cache.update_and_fetch(keys, keys)
    _, _, positions = cache.fetch()
    assert (positions == np.arange(7, 12)).all() and cache.sliding_window == 5
    with pytest.raises(ValueError, match=r"sliding_windows\[0\] = -1"):
        squeezekv.KVCacheFactory.create(squeezekv.KVCacheConfig(head_dim=D), sliding_window=-1)
