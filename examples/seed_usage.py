"""The reference library's usage snippet (the original description's example), on numpy keys instead of an mlx model.

    PYTHONPATH=build/python /usr/bin/python3 examples/seed_usage.py
"""
import numpy as np

from squeezekv import KVCacheBuilder, KVCacheConfig, squeeze_budgets

n_layers, kv_heads, head_dim, prompt = 8, 2, 128, 768

config = KVCacheConfig(
    method="squeeze",
    head_dim=head_dim,
    squeeze_budget=128,    # AVERAGE budget across layers (uniform-H2O baseline)
    squeeze_n_sink=4,      # initial positions never evicted (attention sinks)
    squeeze_strength=1.0,  # 0.0 = uniform (== H2O), 1.0 = full inverse-concentration
)
caches = KVCacheBuilder.for_model(n_layers, config)  # model.make_cache = lambda *_a, **_k: caches

# A mock model whose deeper layers have more concentrated keys (the reference library's benchmark).
rng = np.random.default_rng(0)
direction = np.zeros(head_dim, np.float32)
direction[0] = 4.0


def layer_keys(layer, seq):
    frac = layer / (n_layers - 1)
    noise = rng.standard_normal((1, kv_heads, seq, head_dim)).astype(np.float32)
    return ((1.0 - frac) * noise + frac * direction).astype(np.float16)


for layer, cache in enumerate(caches):  # prefill: each layer measures its concentration
    keys = layer_keys(layer, prompt)
    cache.update_and_fetch(keys, rng.standard_normal(keys.shape).astype(np.float16))
for _ in range(16):  # decode against the frozen schedule
    for layer, cache in enumerate(caches):
        keys = layer_keys(layer, 1)
        kept_keys, kept_values = cache.update_and_fetch(keys, rng.standard_normal(keys.shape).astype(np.float16))

for layer, cache in enumerate(caches):
    print(f"layer {layer}: concentration {cache.concentration:6.3f}  budget {cache.layer_budget:4d}  "
          f"kept {cache.tokens_kept:4d} of {cache.tokens_seen}  ({cache.compression_ratio:.2f}x)")
print(f"budgets {caches.budgets}, mean {np.mean(caches.budgets):.1f}")
print("seed example:", squeeze_budgets([0.1, 0.5, 0.9], 100, 4, 1.0))  # [180, 100, 20]

assert sum(caches.budgets) == n_layers * config.squeeze_budget
assert caches.budgets[0] > caches.budgets[-1]
assert all(cache.tokens_kept == cache.layer_budget for cache in caches)
assert squeeze_budgets([0.1, 0.5, 0.9], 100, 4, 1.0) == [180, 100, 20]
