"""KVCacheConfig: the seed's configuration names (squeeze_budget, squeeze_n_sink, ...) over the
C++ KVCacheConfig. Checked at construction; a bad value raises ValueError naming the parameter."""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

from . import _native

# Python (seed) name -> C++ field, where they differ.
_NATIVE_NAMES = {
    "squeeze_budget": "budget",
    "squeeze_n_sink": "n_sink",
    "squeeze_strength": "strength",
    "squeeze_resolved_budget": "resolved_budget",
}
_SEED_NAMES = {native: seed for seed, native in _NATIVE_NAMES.items()}
_INT_FIELDS = {"head_dim", "squeeze_budget", "squeeze_n_sink", "chunk_size", "window", "kernel"}
_FLOAT_FIELDS = {"squeeze_strength", "recent", "decay", "beta", "squeeze_fraction"}
_STR_FIELDS = {"method", "score", "kv_type", "policy", "allocator", "importance"}
_DEFAULTS = _native.NativeConfig()  # the defaults live in one place: the C++ KVCacheConfig


def _seed_message(message: str) -> str:
    """Renames the C++ fields in an error message to the names the caller used."""
    return re.sub(r"\b(resolved_budget|budget|n_sink|strength)\b(?= = )",
                  lambda m: _SEED_NAMES[m.group(1)], message)


@dataclasses.dataclass
class KVCacheConfig:
    """One cache configuration: a method id (a token policy and a layer allocator) and its
    parameters. Defaults are read from the C++ library's; see ``methods()`` for what each method
    reads."""

    method: str = _DEFAULTS.method
    head_dim: int = _DEFAULTS.head_dim
    squeeze_budget: int = _DEFAULTS.budget             # average rows per layer and KV head
    squeeze_n_sink: int = _DEFAULTS.n_sink             # first positions never evicted; floor n_sink + 1
    squeeze_strength: float = _DEFAULTS.strength       # 0 = uniform (== h2o), 1 = full reallocation
    squeeze_resolved_budget: Optional[int] = None      # explicit budget for a lone cache
    recent: float = _DEFAULTS.recent                   # share of (budget - n_sink) kept as the newest rows
    decay: float = _DEFAULTS.decay                     # scores = decay * scores + a, in (0, 1]; 1 = off
    score: str = _DEFAULTS.score                       # "key-proxy" | "attention"
    kv_type: str = _DEFAULTS.kv_type                   # "f16" | "f32": how rows are stored
    policy: str = ""                                   # override the method's token policy
    allocator: str = ""                                # override the method's layer allocator
    beta: float = _DEFAULTS.beta                       # pyramidkv taper, >= 1
    chunk_size: int = _DEFAULTS.chunk_size             # chunkkv chunk, >= 1
    window: int = _DEFAULTS.window                     # snapkv observation window, < budget
    kernel: int = _DEFAULTS.kernel                     # snapkv pooling width, odd
    importance: str = _DEFAULTS.importance             # "key-dispersion" | "hidden-cosine"
    squeeze_fraction: float = _DEFAULTS.squeeze_fraction  # hidden-cosine: share of the least important group

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            name = field.name
            if name in _INT_FIELDS or (name == "squeeze_resolved_budget" and value is not None):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{name} = {value!r}: must be an int")
            elif name in _FLOAT_FIELDS:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{name} = {value!r}: must be a number")
                setattr(self, name, float(value))
            elif name in _STR_FIELDS and not isinstance(value, str):
                raise ValueError(f"{name} = {value!r}: must be a str")
        for name in ("score", "importance"):  # accept key_proxy as well as key-proxy
            setattr(self, name, getattr(self, name).replace("_", "-"))
        self.to_native()  # every check of the C++ validate()

    def to_native(self) -> "_native.NativeConfig":
        """The C++ KVCacheConfig (validated)."""
        native = _native.NativeConfig()
        try:
            for field in dataclasses.fields(self):
                setattr(native, _NATIVE_NAMES.get(field.name, field.name), getattr(self, field.name))
            native.validate()
        except ValueError as error:
            raise ValueError(_seed_message(str(error))) from None
        return native

    def replace(self, **changes) -> "KVCacheConfig":
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def methods() -> list:
    """Every method id with its policy, allocator, parameters and when to use it."""
    return _native.methods()
