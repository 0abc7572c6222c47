"""The reference library's cache API on numpy: a whole-model update loop with budgets and accounting, the lone
cache of KVCacheFactory.create, and shape errors."""
import numpy as np
import pytest

import squeezekv
from conftest import mock_layer_keys

N_LAYERS, HEADS, D, PREFILL, BUDGET = 6, 2, 16, 96, 24


def run_model(config, rng, decode=8, dtype=np.float32):
    caches = squeezekv.KVCacheBuilder.for_model(N_LAYERS, config)
    outputs = []
    for layer, cache in enumerate(caches):
        keys = mock_layer_keys(rng, layer, N_LAYERS, heads=HEADS, seq=PREFILL, head_dim=D).astype(dtype)
        values = rng.standard_normal(keys.shape).astype(dtype)
        outputs.append(cache.update_and_fetch(keys, values))
    for _ in range(decode):
        for layer, cache in enumerate(caches):
            keys = mock_layer_keys(rng, layer, N_LAYERS, heads=HEADS, seq=1, head_dim=D).astype(dtype)
            outputs[layer] = cache.update_and_fetch(keys, rng.standard_normal(keys.shape).astype(dtype))
    return caches, outputs


def squeeze(**changes):
    return squeezekv.KVCacheConfig(method="squeeze", head_dim=D, squeeze_budget=BUDGET, **changes)


def test_whole_model_loop_budgets_and_accounting():
    caches, outputs = run_model(squeeze(), np.random.default_rng(0))
    assert isinstance(caches, list) and len(caches) == N_LAYERS
    assert caches.is_final
    budgets = caches.budgets
    assert sum(budgets) == N_LAYERS * BUDGET
    assert budgets[0] > budgets[-1]  # the broad first layer gets more than the concentrated last
    concentrations = caches.concentrations
    assert all(a < b for a, b in zip(concentrations, concentrations[1:]))
    assert budgets == squeezekv.squeeze_budgets(concentrations, BUDGET, 4, 1.0)
    for layer, (cache, (keys, values)) in enumerate(zip(caches, outputs)):
        assert keys.shape == values.shape == (1, HEADS, budgets[layer], D)
        assert keys.dtype == np.float32
        assert cache.layer_budget == budgets[layer] and cache.tokens_kept == budgets[layer]
        assert cache.tokens_seen == cache.offset == PREFILL + 8
        assert cache.full_bytes == 2 * HEADS * (PREFILL + 8) * D * 2  # K and V, fp16
        assert cache.kept_bytes >= 2 * HEADS * budgets[layer] * D * 2
        assert cache.compression_ratio == pytest.approx(cache.full_bytes / cache.kept_bytes)
        _, _, positions = cache.fetch()
        assert (positions[..., :4] == np.arange(4)).all()  # the sinks
        assert (np.diff(positions, axis=-1) > 0).all()     # position order
        if budgets[layer] - 4 >= 2:  # a recent window exists (recent = 0.5 of the non-sink rows)
            assert (positions[..., -1] == PREFILL + 7).all()
    assert caches.kept_bytes == sum(c.kept_bytes for c in caches)
    assert caches.compression_ratio == pytest.approx(caches.full_bytes / caches.kept_bytes)


def test_fetch_returns_the_rows_given():
    cache = squeezekv.KVCacheFactory.create(squeezekv.KVCacheConfig(method="full", head_dim=4, kv_type="f32"))
    keys = np.arange(2 * 3 * 5 * 4, dtype=np.float32).reshape(2, 3, 5, 4)
    k, v = cache.update_and_fetch(keys, -keys)
    np.testing.assert_array_equal(k, keys)
    np.testing.assert_array_equal(v, -keys)


def test_strength_zero_is_h2o():
    _, squeezed = run_model(squeeze(squeeze_strength=0.0), np.random.default_rng(3))
    _, h2o = run_model(squeezekv.KVCacheConfig(method="h2o", head_dim=D, squeeze_budget=BUDGET),
                       np.random.default_rng(3))
    for (a, b), (c, d) in zip(squeezed, h2o):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_float16_input_matches_float32():
    _, half = run_model(squeeze(), np.random.default_rng(5), dtype=np.float16)
    _, single = run_model(squeeze(), np.random.default_rng(5), dtype=np.float32)
    for (a, _), (b, _) in zip(half, single):
        np.testing.assert_allclose(a, b, atol=2e-2)


def test_lone_cache_uses_the_average_or_resolved_budget():
    rng = np.random.default_rng(2)
    keys = rng.standard_normal((1, 2, 50, D)).astype(np.float32)
    lone = squeezekv.KVCacheFactory.create(squeeze())
    assert lone.layer_budget == BUDGET and lone.tokens_kept == 0
    k, _ = lone.update_and_fetch(keys, keys)
    assert k.shape == (1, 2, BUDGET, D) and lone.budget_final
    resolved = squeezekv.KVCacheFactory.create(squeeze(squeeze_resolved_budget=10))
    assert resolved.layer_budget == 10
    assert resolved.update_and_fetch(keys, keys)[0].shape == (1, 2, 10, D)


def test_for_model_accepts_model_objects():
    class MlxLike:
        layers = [object()] * 3

    class WithArgs:
        class args:
            n_layers = 2
            n_kv_heads = 4

    assert len(squeezekv.KVCacheBuilder.for_model(MlxLike(), squeeze())) == 3
    assert len(squeezekv.KVCacheBuilder.for_model(WithArgs(), squeeze())) == 2
    with pytest.raises(ValueError, match="model_or_layer_count"):
        squeezekv.KVCacheBuilder.for_model("twelve", squeeze())
    with pytest.raises(ValueError, match="n_layers = 0"):
        squeezekv.KVCacheBuilder.for_model(0, squeeze())


def test_bad_shapes_name_the_parameter():
    caches = squeezekv.KVCacheBuilder.for_model(2, squeeze())
    good = np.zeros((1, 2, 3, D), np.float32)
    with pytest.raises(ValueError, match="keys.shape"):
        caches[0].update_and_fetch(np.zeros((2, 3, D)), good)
    with pytest.raises(ValueError, match="keys.head_dim = 8"):
        caches[0].update_and_fetch(np.zeros((1, 2, 3, 8), np.float32), good)
    caches[0].update_and_fetch(good + 1.0, good)
    with pytest.raises(ValueError, match="keys.heads = 3"):
        caches[1].update_and_fetch(np.ones((1, 3, 3, D), np.float32), np.ones((1, 3, 3, D), np.float32))
    with pytest.raises(ValueError, match="values.seq"):
        caches[1].update_and_fetch(good, np.zeros((1, 2, 4, D), np.float32))
    with pytest.raises(ValueError, match="keys"):
        bad = good.copy()
        bad[0, 0, 0, 0] = np.nan
        caches[1].update_and_fetch(bad, good)
    with pytest.raises(ValueError, match="keys.dtype"):
        caches[1].update_and_fetch(good.astype(np.int32), good)


@pytest.mark.parametrize("method", ["h2o", "streaming", "window", "full", "squeeze"])
def test_eight_threads_share_one_cache(method):
    # update releases the GIL; the package serialises calls on one cache, so nothing is lost.
    import threading

    config = squeezekv.KVCacheConfig(method=method, head_dim=D, squeeze_budget=16)
    caches = squeezekv.KVCacheBuilder.for_model(2, config, n_kv_heads=HEADS)
    keys = np.random.default_rng(1).standard_normal((1, HEADS, 8, D)).astype(np.float32)
    errors = []

    def work(t):
        try:
            for i in range(60):
                caches[(t + i) % 2].update_and_fetch(keys, keys)
        except Exception as e:  # noqa: BLE001 - any error fails the test below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for cache in caches:
        assert cache.tokens_seen == 8 * 30 * 8
        if method != "full":
            assert cache.tokens_kept <= cache.layer_budget


def test_reset_of_one_squeeze_layer_keeps_its_budget():
    config = squeezekv.KVCacheConfig(method="squeeze", head_dim=D, squeeze_budget=16)
    caches = squeezekv.KVCacheBuilder.for_model(3, config, n_kv_heads=HEADS)
    rng = np.random.default_rng(2)
    for layer, cache in enumerate(caches):
        cache.update_and_fetch(*(mock_layer_keys(rng, layer, 3, heads=HEADS, seq=200, head_dim=D),) * 2)
    caches[1].reset()
    for _ in range(10):
        keys = mock_layer_keys(rng, 1, 3, heads=HEADS, seq=200, head_dim=D)
        caches[1].update_and_fetch(keys, keys)
    assert caches[1].tokens_seen == 2000
    assert caches[1].tokens_kept <= caches[1].layer_budget


def test_for_model_rejects_absurd_layer_counts_before_allocating():
    config = squeezekv.KVCacheConfig(method="h2o", head_dim=D, squeeze_budget=16)
    with pytest.raises(ValueError, match="n_layers"):
        squeezekv.KVCacheBuilder.for_model(2**31, config, n_kv_heads=1)
    with pytest.raises(ValueError, match="n_kv_heads"):
        squeezekv.KVCacheBuilder.for_model(2, config, n_kv_heads=2**20)


@pytest.mark.parametrize("kv_type, row_bytes", [("q8_0", 18), ("q4_0", 10)])
def test_quantized_storage_round_trip_and_bytes(kv_type, row_bytes):
    # head_dim 16 is one block: q8_0 row = 2 + 16 bytes, q4_0 row = 2 + 8 bytes.
    config = squeezekv.KVCacheConfig(method="full", head_dim=16, kv_type=kv_type)
    assert config.kv_type == kv_type and config.k_type == "auto"
    cache = squeezekv.KVCacheFactory.create(config)
    rng = np.random.default_rng(5)
    keys = rng.standard_normal((1, 2, 7, 16)).astype(np.float32)
    k, v = cache.update_and_fetch(keys, -keys)
    step = np.abs(keys).max(axis=-1, keepdims=True) / (127 if kv_type == "q8_0" else 8)
    assert (np.abs(k - keys) <= step * 1.01).all()          # within a step (q4_0's clamp)
    assert (np.abs(v + keys) <= step * 1.01).all()
    assert not np.array_equal(k, keys)                     # really quantized
    assert cache.kept_bytes % (2 * 2 * row_bytes) == 0          # whole slots: 2 heads, keys + values
    assert cache.kept_bytes >= cache.full_bytes
    assert cache.full_bytes == 2 * 7 * 2 * row_bytes


def test_kivi_storage_round_trip_and_bytes():
    # head_dim 32, group 8, residual 16: 36 tokens give 32 quantized keys (4 full groups; the 4 left
    # wait for a fifth) and 20 quantized values (the newest 16 stay fp16).
    config = squeezekv.KVCacheConfig(method="kivi", head_dim=32, bit_width_inlier=4, kivi_group_size=8,
                                     residual_length=16)
    cache = squeezekv.KVCacheFactory.create(config)
    rng = np.random.default_rng(6)
    keys = rng.standard_normal((1, 2, 36, 32)).astype(np.float32)
    k, v = cache.update_and_fetch(keys, -keys)
    # Keys: per channel over 8 tokens, 15 steps; values: per token over 8 channels.
    key_step = np.ptp(keys[:, :, :32].reshape(1, 2, 4, 8, 32), axis=3).max() / 15
    assert np.abs(k - keys).max() <= key_step / 2 + 1e-3
    assert np.abs(k[:, :, 32:] - keys[:, :, 32:]).max() < 2e-3        # fp16 rows
    assert not np.array_equal(k[:, :, :32], keys[:, :, :32])         # really quantized
    assert np.abs(v[:, :, 20:] + keys[:, :, 20:]).max() < 2e-3
    assert 0 < np.abs(v[:, :, :20] + keys[:, :, :20]).max() <= np.ptp(keys, axis=-1).max() / 15 / 2 + 1e-3
    assert cache.kept_bytes < 2 * 36 * 2 * 32 * 2                     # below the f16 cache


def test_keys_and_values_apart():
    config = squeezekv.KVCacheConfig(method="h2o", head_dim=16, squeeze_budget=8, k_type="q8_0", v_type="q4_0")
    assert (config.k_type, config.v_type, config.kv_type) == ("q8_0", "q4_0", "f16")
    with pytest.raises(ValueError):
        squeezekv.KVCacheConfig(method="full", head_dim=16, kv_type="q5_0")
