"""squeezekv: KV-cache eviction (SqueezeAttention, H2O, PyramidKV, ...) with the reference library's names.

    config = KVCacheConfig(method="squeeze", head_dim=128, squeeze_budget=512)
    caches = KVCacheBuilder.for_model(32, config)      # one cache per layer, one coordinator
    keys, values = caches[0].update_and_fetch(k, v)    # [batch, heads, seq, head_dim] numpy

The engine: ``Model.load(path).generate(...)``, ``.perplexity(...)`` and ``.sweep(...)``; a cache
saved and continued later: ``Model.generate(..., save_cache=path)``, ``load_cache(path, model)``.
"""
from ._native import FormatError
from .cache import KVCacheBuilder, KVCacheFactory, LayerCache, ModelCaches
from .config import KVCacheConfig, methods, parameters
from .engine import Cache, Model, load_cache, load_model
from .functions import concentration_score, pyramid_budgets, squeeze_budgets

__all__ = [
    "Cache",
    "FormatError",
    "KVCacheBuilder",
    "KVCacheConfig",
    "KVCacheFactory",
    "LayerCache",
    "Model",
    "ModelCaches",
    "concentration_score",
    "load_cache",
    "load_model",
    "methods",
    "parameters",
    "pyramid_budgets",
    "squeeze_budgets",
]
