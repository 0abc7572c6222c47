"""The GGUF engine from Python: load a model, generate, perplexity and sweeps. Results are plain
dicts, lists and floats."""
from __future__ import annotations

import os
from typing import Callable, Iterable, Optional, Sequence, Union

from . import _checks, _native
from .config import KVCacheConfig

Text = Union[str, Sequence[int]]


def _full() -> KVCacheConfig:
    return KVCacheConfig(method="full")


class Model:
    """A GGUF Llama-family model (memory-mapped) with its tokenizer."""

    def __init__(self, native: "_native.Model"):
        self._native = native
        self._info = native.info()

    @classmethod
    def load(cls, path: Union[str, os.PathLike], repack: bool = True) -> "Model":
        """Raises FormatError (an OSError and a ValueError) naming what is missing or malformed.

        repack: regroup quantised matrices at load for x86 CPUs with AVX2 or AVX-512 (same
        results, faster batches and prompts, still one resident copy of the weights); False reads
        the file in place.
        """
        return cls(_native.Model.load(_checks.path(path), bool(repack)))

    @property
    def info(self) -> dict:
        return dict(self._info)

    n_layers = property(lambda self: self._info["n_layers"])
    n_heads = property(lambda self: self._info["n_heads"])
    n_kv_heads = property(lambda self: self._info["n_kv_heads"])
    head_dim = property(lambda self: self._info["head_dim"])
    vocab = property(lambda self: self._info["vocab"])
    context_length = property(lambda self: self._info["context_length"])
    # Per layer: 0 for a global layer, W for one attending over its newest W positions (Gemma 3).
    layer_windows = property(lambda self: list(self._info["layer_windows"]))

    @property
    def layers(self) -> range:
        """One entry per layer, so code written for mlx-lm models (len(model.layers)) works."""
        return range(self.n_layers)

    def tokenize(self, text: str, add_bos: bool = True) -> list:
        """Token ids of text; with add_bos, BOS first when the model asks for one (add_bos_token)."""
        return self._native.tokenize(text, add_bos)

    def tokenize_file(self, path: Union[str, os.PathLike]) -> list:
        """Tokens of a text file as llama-perplexity reads it (one trailing newline dropped, BOS)."""
        return self._native.tokenize_file(_checks.path(path))

    def detokenize(self, tokens: Iterable[int]) -> str:
        return self._native.detokenize([int(t) for t in tokens])

    def generate(self, prompt: str, config: Optional[KVCacheConfig] = None, n_predict: int = 128,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95, seed: int = 0,
                 n_batch: int = 512, n_ctx: int = 0, threads: int = 0,
                 on_token: Optional[Callable[[int], None]] = None, cache: Optional["Cache"] = None,
                 save_cache: Optional[Union[str, os.PathLike]] = None) -> dict:
        """Generates after ``prompt`` with any cache configuration (default: the full cache).
        temperature 0 is greedy. Returns text, tokens, prompt_tokens, layer_budgets, layer_kept,
        kept_bytes, full_bytes, compression_ratio, speeds and stopped_at_eos.

        cache: a ``Cache`` (``load_cache`` or ``Model.new_cache``) to continue: ``prompt`` is the
        text that follows the tokens it has seen (or begins with them), and the cache goes on
        holding what this call adds; its configuration is its own. save_cache: a path the cache is
        written to at the end, the whole output fed (docs/cache_file.md)."""
        if cache is not None and config is not None:
            raise ValueError("config: a cache given keeps its own configuration (leave config out)")
        config = _full() if config is None else _checks.instance(config, KVCacheConfig, "config")
        if not isinstance(prompt, str):
            raise ValueError(f"prompt = {prompt!r}: must be a str")
        native_cache = cache._native if cache is not None else None
        save = os.fspath(save_cache) if save_cache is not None else ""
        return _native.generate(self._native, config.to_native(), prompt, _checks.integer(n_predict, "n_predict", 0),
                                _checks.integer(n_batch, "n_batch", 1), _checks.integer(n_ctx, "n_ctx", 0),
                                _checks.number(temperature, "temperature"), _checks.integer(top_k, "top_k"),
                                _checks.number(top_p, "top_p"), _checks.integer(seed, "seed", 0, (1 << 64) - 1),
                                _checks.integer(threads, "threads", 0), on_token, native_cache, save)

    def new_cache(self, config: Optional[KVCacheConfig] = None) -> "Cache":
        """An empty cache of this model that outlives one ``generate`` call (default: full)."""
        config = _full() if config is None else _checks.instance(config, KVCacheConfig, "config")
        return Cache(_native.new_cache(self._native, config.to_native()), self)

    def sweep(self, text: Text, configs: Sequence[KVCacheConfig], n_ctx: int = 512, n_batch: int = 512,
              max_chunks: int = 0, threads: int = 0) -> list:
        """Perplexity of ``text`` (a str, tokenized with BOS, or token ids) under each
        configuration, every one compared with one shared full-cache pass (KL divergence, top-1
        agreement). One dict per configuration, its ``config`` included."""
        configs = list(configs)
        if not configs:
            raise ValueError("configs = []: give at least one KVCacheConfig")
        for i, config in enumerate(configs):
            if not isinstance(config, KVCacheConfig):
                raise ValueError(f"configs[{i}] = {config!r}: must be a squeezekv.KVCacheConfig")
        tokens = self.tokenize(text) if isinstance(text, str) else [int(t) for t in text]
        results = _native.perplexity(self._native, tokens, [c.to_native() for c in configs],
                                     _checks.integer(n_ctx, "n_ctx"), _checks.integer(n_batch, "n_batch"),
                                     _checks.integer(max_chunks, "max_chunks"), _checks.integer(threads, "threads"))
        for config, result in zip(configs, results):
            result["config"] = config
        return results

    def perplexity(self, text: Text, config: Optional[KVCacheConfig] = None, **options) -> dict:
        """``sweep`` with one configuration (default: the full cache)."""
        config = _full() if config is None else _checks.instance(config, KVCacheConfig, "config")
        return self.sweep(text, [config], **options)[0]

    def __repr__(self) -> str:
        return (f"Model({self._info['arch']}, {self.n_layers} layers, {self.n_kv_heads} KV heads, "
                f"head_dim {self.head_dim})")


def load_model(path: Union[str, os.PathLike], repack: bool = True) -> Model:
    return Model.load(path, repack)


class Cache:
    """A model's cache kept across calls and saved to a file (docs/cache_file.md): from
    ``load_cache(path, model)`` or ``Model.new_cache(config)``, continued by
    ``Model.generate(..., cache=c)``."""

    def __init__(self, native: "_native.EngineCache", model: Model):
        self._native = native
        self.model = model

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the cache with the tokens it has seen; FormatError (an OSError) naming the path
        when it cannot be written."""
        self._native.save(os.fspath(path))

    tokens = property(lambda self: list(self._native.tokens))
    kept_bytes = property(lambda self: self._native.kept_bytes)
    full_bytes = property(lambda self: self._native.full_bytes)
    layer_budgets = property(lambda self: list(self._native.layer_budgets))

    @property
    def method(self) -> str:
        return self._native.config.get("method")

    def __repr__(self) -> str:
        return f"Cache({self.method}, {len(self.tokens)} tokens, {self.kept_bytes} bytes)"


def load_cache(path: Union[str, os.PathLike], model: Model) -> Cache:
    """Loads a cache file saved for ``model`` (``Cache.save``, ``--save-cache``): FormatError (an
    OSError and a ValueError) naming the file and what does not match (another model, another
    format version, a truncated or corrupt file)."""
    if not isinstance(model, Model):
        raise ValueError(f"model = {model!r}: must be a squeezekv.Model")
    return Cache(_native.load_cache(model._native, os.fspath(path)), model)
