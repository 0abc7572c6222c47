"""KVCacheConfig: every parameter of the C++ registry as a keyword, with the reference library's
names where they differ (squeeze_budget, squeeze_n_sink, ...). Defaults come from the registry;
checked at construction; a bad value raises ValueError naming the parameter."""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Optional

from . import _native

# Python (reference library) name -> C++ name, where they differ.
_NATIVE_NAMES = {
    "squeeze_budget": "budget",
    "squeeze_n_sink": "n_sink",
    "squeeze_strength": "strength",
    "squeeze_resolved_budget": "resolved_budget",
    "kivi_group_size": "kivi_group",
    "residual_length": "kivi_residual",
}
_SEED_NAMES = {native: seed for seed, native in _NATIVE_NAMES.items()}
_PARAMS = _native.parameters()  # the registry: the only list of names and defaults
_KINDS = {p["name"]: p["kind"] for p in _PARAMS}


def _python_default(param: dict):
    text, kind = param["default"], param["kind"]
    if param["optional"] and text == "none":
        return None
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    return text


def _seed_message(message: str) -> str:
    """Renames the C++ fields in an error message to the names the caller used."""
    return re.sub(r"\b(resolved_budget|budget|n_sink|strength|kivi_group|kivi_residual)\b(?= = )",
                  lambda m: _SEED_NAMES[m.group(1)], message)


class _ConfigMethods:
    """Checks and conversion shared by the generated KVCacheConfig dataclass."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            name, value = field.name, getattr(self, field.name)
            if name == "bit_width_inlier":
                if value is not None and (isinstance(value, bool) or value not in (2, 4)):
                    raise ValueError(f"bit_width_inlier = {value!r}: KIVI codes are 2 or 4 bits")
                continue
            kind = _KINDS[_NATIVE_NAMES.get(name, name)]
            if value is None and field.default is None:
                continue
            if kind == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{name} = {value!r}: must be an int")
            elif kind == "float":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{name} = {value!r}: must be a number")
                if isinstance(value, int) and not -2**53 <= value <= 2**53:
                    raise ValueError(f"{name} = {value!r}: too large to be read as a float exactly")
                setattr(self, name, float(value))
            elif not isinstance(value, str):
                raise ValueError(f"{name} = {value!r}: must be a str")
        for name in ("score", "importance"):  # accept key_proxy as well as key-proxy
            setattr(self, name, getattr(self, name).replace("_", "-"))
        self.to_native()  # every check of the C++ validate()

    def to_native(self) -> "_native.NativeConfig":
        """The C++ KVCacheConfig (validated)."""
        native = _native.NativeConfig()
        try:
            for field in dataclasses.fields(self):
                if field.name == "bit_width_inlier":
                    continue
                value = getattr(self, field.name)
                if isinstance(value, float):
                    text = repr(value) if math.isfinite(value) else str(value)
                else:
                    text = "none" if value is None else str(value)
                native.set(_NATIVE_NAMES.get(field.name, field.name), text)
            if self.bit_width_inlier is not None:  # the reference library's KIVI bit width
                wanted = f"kivi{self.bit_width_inlier}"
                if self.kv_type not in ("f16", wanted):
                    raise ValueError(f"bit_width_inlier = {self.bit_width_inlier}: conflicts with kv_type = "
                                     f"{self.kv_type} (give one of them)")
                native.set("kv_type", wanted)
            native.validate()
        except ValueError as error:
            raise ValueError(_seed_message(str(error))) from None
        return native

    def replace(self, **changes) -> "KVCacheConfig":
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _fields() -> list:
    fields = []
    for param in _PARAMS:
        name = _SEED_NAMES.get(param["name"], param["name"])
        kind = {"int": int, "float": float}.get(param["kind"], str)
        default = _python_default(param)
        fields.append((name, Optional[int] if default is None else kind,
                       dataclasses.field(default=default, metadata={"help": param["help"]})))
    fields.append(("bit_width_inlier", Optional[int], dataclasses.field(
        default=None, metadata={"help": "the reference library's KIVI code width: 2 or 4 (sets kv_type kivi2 "
                                        "or kivi4); None: kv_type decides"})))
    return fields


KVCacheConfig = dataclasses.make_dataclass(  # pylint: disable=invalid-name
    "KVCacheConfig", _fields(), bases=(_ConfigMethods,),
    namespace={"__doc__": "One cache configuration: a method id (a token policy and a layer allocator) "
                          "and its parameters, one keyword per registered parameter. Defaults are the "
                          "C++ registry's; see ``methods()`` and ``parameters()``."})


def methods() -> list:
    """Every method id with its policy, allocator, parameters and when to use it."""
    return _native.methods()


def parameters() -> list:
    """Every registered parameter: name (C++), kind, default, help and the components that own it."""
    return _native.parameters()


KVCacheConfig.__module__ = __name__
