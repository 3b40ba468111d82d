"""Accepted ranges of numeric options, one message form for all: ``NAME: must be RANGE, got VALUE``.

The CLI checks its options under their flags (``--hz``), ``Settings`` (so ``stepscope.init()``) under
their field names (``profiles_hz``); both raise ValueError with that one line. NaN, infinities, booleans
and non-numbers are refused like out-of-range values. Stdlib only: the recording side imports it.
"""

from __future__ import annotations

import math
from typing import Any

HZ_MAX = 10_000  # samples/s per thread; above this the sampler only measures itself
HZ_MIN = 0.01  # one sample per 100 s; below, the period overflows the clock arithmetic and says nothing


def show(value: Any) -> str:
    """``value`` as the user wrote it, near enough: ``1e-12``, ``nan``, ``5`` (not ``5.0``), ``'abc'``."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return repr(value) if isinstance(value, str) else str(value)


def _number(name: str, value: Any, rule: str, integer: bool) -> float | int:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"{name}: must be {rule}, got {show(value)}")
    return value


def in_range(name: str, value: Any, lo: float, hi: float, *, integer: bool = False, unit: str = "") -> float | int:
    """``value`` if it is a finite number with ``lo <= value <= hi`` (an int when ``integer``).

    Raises ValueError ``"{name}: must be between {lo} and {hi}{unit}, got {value}"``."""
    kind = "an integer " if integer else ""
    rule = f"{kind}between {show(lo)} and {show(hi)}{unit}"
    v = _number(name, value, rule, integer)
    if not lo <= v <= hi:
        raise ValueError(f"{name}: must be {rule}, got {show(value)}")
    return v


def hz(name: str, value: Any) -> float:
    """A sampling rate in samples/s per thread: 0 (sampling off) or ``HZ_MIN`` to ``HZ_MAX``. Raises ValueError."""
    rule = f"0 (off) or between {HZ_MIN} and {HZ_MAX}"
    v = _number(name, value, rule, False)
    if v != 0 and not HZ_MIN <= v <= HZ_MAX:
        raise ValueError(f"{name}: must be {rule}, got {show(value)}")
    return float(v)


def image_size(name: str, value: Any) -> int:
    """An image side in px: a multiple of 8 from 8 to 8192 (what the SD pipelines accept). Raises ValueError."""
    rule = "a multiple of 8 between 8 and 8192"
    v = _number(name, value, rule, True)
    if not 8 <= v <= 8192 or v % 8:
        raise ValueError(f"{name}: must be {rule}, got {show(value)}")
    return v
