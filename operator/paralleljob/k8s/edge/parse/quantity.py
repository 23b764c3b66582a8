"""Kubernetes resource quantities (``8``, ``1k``, ``500m``, ``1.5Gi``, ``1e3``), parsed exactly.

One parser for every quantity the operator reads: a node's allocatable GPUs and CPU, a container's requests,
a pod's overhead. The grammar is the API machinery's own: an optional sign, digits with at most one decimal
point, then a binary suffix (``Ki`` .. ``Ei``), a decimal suffix (``n u m "" k M G T P E``) or a decimal
exponent (``e3``, ``E-2``). Values come back as exact :class:`~fractions.Fraction` s, so ``0.1`` CPUs is
exactly 100 millicores. Comparisons use the scheduler's units: millicores for CPU, whole units (rounded up)
for everything else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction

_NUMBER = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(.*)$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT = re.compile(r"^[eE]([+-]?\d+)$")

CPU = "cpu"


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: object) -> Fraction:
    """``"1k"`` -> 1000, ``"500m"`` -> 1/2, ``"1Gi"`` -> 2**30; an int is taken as is. Raises QuantityError."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _NUMBER.match(value.strip()) if value == value.strip() else None
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    sign, digits, suffix = match.groups()
    number = Fraction(digits)
    if sign == "-":
        number = -number
    if suffix in _BINARY:
        return _scaled(number, 1024, _BINARY[suffix])
    if suffix in _DECIMAL:
        return _scaled(number, 10, _DECIMAL[suffix])
    exponent = _EXPONENT.match(suffix)
    if exponent is not None and abs(int(exponent.group(1))) <= 60:
        return _scaled(number, 10, int(exponent.group(1)))
    raise QuantityError(f"{value!r} is not a quantity (unknown suffix {suffix!r})")


def _scaled(number: Fraction, base: int, power: int) -> Fraction:
    factor = Fraction(base**power) if power >= 0 else Fraction(1, base**-power)
    return Fraction(number * factor)


def scheduler_units(resource: str, amount: Fraction) -> int:
    """The integer the scheduler compares: millicores for CPU, whole units rounded up for the rest."""
    return math.ceil(amount * 1000) if resource == CPU else math.ceil(amount)


def parse_count(value: object) -> int | None:
    """A whole, non-negative count (``"8"``, ``"1k"``, ``8``); None when it is not one."""
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return None
    if amount < 0 or amount.denominator != 1:
        return None
    return int(amount)


def parse_resources(values: Mapping[str, object]) -> tuple[dict[str, int], list[str]]:
    """A resource list in scheduler units, and a complaint for every entry that is not a quantity >= 0."""
    out: dict[str, int] = {}
    bad: list[str] = []
    for name, raw in values.items():
        try:
            amount = parse_quantity(raw)
        except QuantityError:
            bad.append(f"{name}={raw!r} is not a quantity")
            continue
        if amount < 0:
            bad.append(f"{name}={raw!r} is negative")
            continue
        out[str(name)] = scheduler_units(str(name), amount)
    return out, bad


def format_amount(resource: str, units: int) -> str:
    """Scheduler units back to a readable quantity (``1500`` millicores -> ``1500m``, ``2**31`` -> ``2Gi``)."""
    if resource == CPU:
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    for suffix, power in (("Ti", 4), ("Gi", 3), ("Mi", 2)):
        if units >= 1024**power and units % 1024**power == 0:
            return f"{units // 1024**power}{suffix}"
    return str(units)
