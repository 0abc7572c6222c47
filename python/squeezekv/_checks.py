"""Arguments checked before they reach the native module, so that a bad one is a ValueError naming
the parameter (pybind's own conversion errors are TypeErrors that name none)."""
from __future__ import annotations

import numbers
import os

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def integer(value, name: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
    """value as an int in [lo, hi] (a 32-bit int by default)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} = {value!r}: must be an int")
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(f"{name} = {v}: must lie in [{lo}, {hi}]")
    return v


def number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} = {value!r}: must be a number")
    return float(value)


def path(value, name: str = "path") -> str:
    """A file path as text; a NUL byte would silently cut it short at the C boundary."""
    try:
        text = os.fspath(value)
    except TypeError:
        raise ValueError(f"{name} = {value!r}: must be a str or os.PathLike") from None
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        raise ValueError(f"{name} = {text!r}: contains a NUL byte")
    return text


def instance(value, cls, name: str):
    if not isinstance(value, cls):
        raise ValueError(f"{name} = {value!r}: must be a squeezekv.{cls.__name__}")
    return value
