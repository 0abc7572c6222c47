"""The reference library's cache entry points on numpy arrays.

``KVCacheFactory.create(config)`` gives one lone layer (no coordinator: a uniform layer with the
average budget, or squeeze_resolved_budget). ``KVCacheBuilder.for_model(model, config)`` gives one
cache per layer sharing one coordinator, which is where the squeeze reallocation happens.
``sliding_windows`` (one per layer: 0 for a global layer, W for one that attends over the newest W
positions, as Gemma 3's) makes sliding layers: each holds exactly its window, and the method (its
policy, and its allocator's budget, measurement and taper) governs the global layers alone.

The native cache needs the batch size and KV head count; unless the model tells them, they are
taken from the first ``update_and_fetch`` (every layer of one model must then agree).

Threads: a native cache is single-writer (the C++ library rejects overlapping calls). These
classes serialise every call on one cache (all layers of one model share a lock), so several
threads may share a cache; their updates run one at a time, in whatever order they take the lock."""
from __future__ import annotations

import threading
from typing import Optional

import numpy as np

from . import _native
from .config import KVCacheConfig


def _as_block(array, name: str) -> np.ndarray:
    block = np.asarray(array)
    if block.ndim != 4:
        raise ValueError(f"{name}.shape = {block.shape}: expected [batch, heads, seq, head_dim]")
    if not np.issubdtype(block.dtype, np.floating):
        raise ValueError(f"{name}.dtype = {block.dtype}: expected float32 or float16")
    return block


class _Group:
    """The native cache behind a set of layers, built on first use."""

    def __init__(self, config: KVCacheConfig, n_layers: Optional[int], n_kv_heads=None, n_batch=None,
                 sliding_windows=None):
        if not isinstance(config, KVCacheConfig):
            raise ValueError(f"config = {config!r}: must be a squeezekv.KVCacheConfig")
        self.config = config
        self.native_config = config.to_native()
        self.n_layers = n_layers  # None: a lone layer (KVCacheFactory.create)
        self.sliding_windows = list(sliding_windows) if sliding_windows is not None else [0] * (n_layers or 1)
        self.native = None
        self.lock = threading.Lock()  # one call at a time on the native cache (and its build)
        if n_kv_heads is not None:
            self.build(n_kv_heads, n_batch or 1)

    def build(self, n_kv_heads: int, n_batch: int):
        if self.n_layers is None:
            self.native = _native.create_layer(self.native_config, n_kv_heads, n_batch, self.sliding_windows[0])
        else:
            self.native = _native.ModelCache(self.native_config, self.n_layers, n_kv_heads, n_batch,
                                             self.sliding_windows)

    def layer(self, index: int, keys: Optional[np.ndarray] = None):
        if self.native is None:
            if keys is None:
                return None
            self.build(int(keys.shape[1]), int(keys.shape[0]))
        return self.native if self.n_layers is None else self.native.layer(index)


class LayerCache:
    """One attention layer's evicting cache (mlx-lm's per-layer cache interface)."""

    def __init__(self, group: _Group, index: int):
        self._group = group
        self._index = index

    def update_and_fetch(self, keys, values):
        """Appends keys and values ([batch, kv_heads, seq, head_dim], float32 or float16), evicts
        to this layer's budget, and returns the kept keys and values as float32 arrays in position
        order. Heads holding fewer rows than the fullest are zero-padded at the end; ``fetch()``
        also gives the positions (-1 for padding)."""
        keys, values = _as_block(keys, "keys"), _as_block(values, "values")
        with self._group.lock:
            native = self._group.layer(self._index, keys)
            native.update(keys, values)
            k, v, _ = native.fetch()
        return k, v

    def fetch(self):
        """(keys, values, positions) of the kept rows; empty arrays before the first update."""
        with self._group.lock:
            native = self._native()
            if native is not None:
                return native.fetch()
        d = self._group.config.head_dim
        empty = np.zeros((0, 0, 0, d), np.float32)
        return empty, empty.copy(), np.zeros((0, 0, 0), np.int64)

    def _native(self):
        return self._group.layer(self._index)

    def _stat(self, name: str, before):
        with self._group.lock:
            native = self._native()
            return before if native is None else getattr(native, name)

    @property
    def layer_index(self) -> int:
        return self._index

    @property
    def sliding_window(self) -> int:
        """0 for a global (evicting) layer; W for a sliding one, which holds the newest W positions."""
        return self._group.sliding_windows[self._index]

    @property
    def layer_budget(self) -> int:
        """Rows per head this layer keeps (the average budget until the schedule is final; a
        sliding layer's window)."""
        config = self._group.config
        fallback = self.sliding_window or config.squeeze_budget
        if self._group.n_layers is None and config.squeeze_resolved_budget is not None:
            fallback = config.squeeze_resolved_budget
        return self._stat("layer_budget", fallback)

    @property
    def budget_final(self) -> bool:
        return self._stat("budget_final", False)

    @property
    def concentration(self) -> float:
        return self._stat("concentration", 0.0)

    @property
    def tokens_seen(self) -> int:
        return self._stat("tokens_seen", 0)

    @property
    def offset(self) -> int:
        """mlx-lm's name for the tokens seen (the next token's position)."""
        return self.tokens_seen

    @property
    def tokens_kept(self) -> int:
        """Rows held by the fullest head."""
        return self._stat("tokens_kept", 0)

    @property
    def kept_bytes(self) -> int:
        return self._stat("kept_bytes", 0)

    @property
    def nbytes(self) -> int:
        """mlx-lm's name for the resident bytes."""
        return self.kept_bytes

    @property
    def full_bytes(self) -> int:
        return self._stat("full_bytes", 0)

    @property
    def compression_ratio(self) -> float:
        return self._stat("compression_ratio", 1.0)

    def reset(self) -> None:
        with self._group.lock:
            native = self._native()
            if native is not None:
                native.reset()

    def __repr__(self) -> str:
        return (f"LayerCache(layer={self._index}, method={self._group.config.method!r}, "
                f"budget={self.layer_budget}, kept={self.tokens_kept}, seen={self.tokens_seen})")


class ModelCaches(list):
    """The per-layer caches of one model (a list, as ``model.make_cache`` expects), plus the
    whole-model view: budgets, measurements and memory."""

    def __init__(self, group: _Group):
        super().__init__(LayerCache(group, i) for i in range(group.n_layers))
        self._group = group

    @property
    def config(self) -> KVCacheConfig:
        return self._group.config

    @property
    def budgets(self) -> list:
        return [layer.layer_budget for layer in self]

    @property
    def concentrations(self) -> list:
        return [layer.concentration for layer in self]

    @property
    def is_final(self) -> bool:
        """True once the coordinator has published the schedule (always for fixed schedules)."""
        native = self._group.native
        return native.is_final if native is not None else not self._group.native_config.schedule_waits_for_measurement

    @property
    def sliding_windows(self) -> list:
        """One per layer: 0 for a global (evicting) layer, W for a sliding one."""
        return list(self._group.sliding_windows)

    @property
    def kept_bytes(self) -> int:
        return sum(layer.kept_bytes for layer in self)

    @property
    def sliding_kept_bytes(self) -> int:
        """Resident bytes of the sliding layers (their windows)."""
        return sum(layer.kept_bytes for layer in self if layer.sliding_window)

    @property
    def evicting_kept_bytes(self) -> int:
        """Resident bytes of the global layers, the ones the method evicts in."""
        return sum(layer.kept_bytes for layer in self if not layer.sliding_window)

    @property
    def full_bytes(self) -> int:
        return sum(layer.full_bytes for layer in self)

    @property
    def compression_ratio(self) -> float:
        kept = self.kept_bytes
        return 1.0 if kept == 0 else self.full_bytes / kept

    def reset(self) -> None:
        with self._group.lock:
            if self._group.native is not None:
                self._group.native.reset()


def _layer_count_and_heads(model_or_layer_count):
    """(n_layers, n_kv_heads or None) of a layer count, a squeezekv Model, or any model object
    with ``.layers`` (mlx-lm) or ``n_layers`` (attribute or ``args``)."""
    from .engine import Model  # the engine module imports this one

    m = model_or_layer_count
    if isinstance(m, Model):
        return m.n_layers, m.n_kv_heads
    if isinstance(m, (int, np.integer)) and not isinstance(m, bool):
        return int(m), None
    for owner in (m, getattr(m, "args", None), getattr(m, "config", None)):
        count = getattr(owner, "n_layers", None) if owner is not None else None
        if isinstance(count, (int, np.integer)):
            heads = getattr(owner, "n_kv_heads", None)
            return int(count), int(heads) if isinstance(heads, (int, np.integer)) else None
    layers = getattr(m, "layers", None)
    if layers is not None:
        return len(layers), None
    raise ValueError(f"model_or_layer_count = {m!r}: expected a layer count, a squeezekv.Model, "
                     "or a model with .layers or n_layers")


def _checked_windows(windows, n_layers: int) -> list:
    """The windows as ints, checked before any cache is built (the native cache checks again)."""
    windows = list(windows)
    if len(windows) != n_layers:
        raise ValueError(f"sliding_windows has {len(windows)} entries: must equal n_layers = {n_layers} "
                         "(one per layer, 0 for a global one)")
    for i, w in enumerate(windows):
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not 0 <= w <= 1 << 30:
            raise ValueError(f"sliding_windows[{i}] = {w!r}: must be 0 (a global layer) or a window in [1, {1 << 30}]")
    return [int(w) for w in windows]


class KVCacheFactory:
    @staticmethod
    def create(config: KVCacheConfig, n_kv_heads: Optional[int] = None,
               n_batch: Optional[int] = None, sliding_window: int = 0) -> LayerCache:
        """One cache without a coordinator: a uniform layer with squeeze_budget, or
        squeeze_resolved_budget when set (the reference library's single-cache fallback); with
        sliding_window W > 0, a sliding layer holding the newest W positions."""
        windows = _checked_windows([sliding_window], 1)
        return LayerCache(_Group(config, None, n_kv_heads, n_batch, windows), 0)


class KVCacheBuilder:
    @staticmethod
    def for_model(model_or_layer_count, config: KVCacheConfig, n_kv_heads: Optional[int] = None,
                  n_batch: Optional[int] = None, sliding_windows=None) -> ModelCaches:
        """One cache per layer sharing one coordinator. A squeezekv Model also fixes the KV heads
        and head_dim (the model's head_dim replaces config.head_dim, as the engine does).
        sliding_windows: one per layer, 0 for a global layer, W for a sliding one (None: a Model's
        own, else every layer global)."""
        n_layers, model_heads = _layer_count_and_heads(model_or_layer_count)
        if not 1 <= n_layers <= _native.MAX_CACHE_LAYERS:
            # before the per-layer wrappers are built: a huge count would exhaust memory first
            raise ValueError(f"n_layers = {n_layers}: must lie in [1, {_native.MAX_CACHE_LAYERS}]")
        if sliding_windows is not None:
            sliding_windows = _checked_windows(sliding_windows, n_layers)
        from .engine import Model

        if isinstance(model_or_layer_count, Model):
            config = config.replace(head_dim=model_or_layer_count.head_dim)
            if sliding_windows is None and any(model_or_layer_count.layer_windows):
                sliding_windows = model_or_layer_count.layer_windows  # as the engine builds its caches
        heads = n_kv_heads if n_kv_heads is not None else model_heads
        return ModelCaches(_Group(config, n_layers, heads, n_batch, sliding_windows))
