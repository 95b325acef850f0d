"""Type checks of values read from JSON files (manifests, checkpoint configs, datasets), one rule for all."""

from __future__ import annotations

import math


def of_type(value: object, kinds: tuple[type, ...]) -> bool:
    """``isinstance`` as JSON means it: true / false are not numbers, and a count is never a boolean."""
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def type_names(kinds: tuple[type, ...]) -> str:
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def is_number(value: object) -> bool:
    """A finite JSON number (int or float, not a boolean)."""
    return of_type(value, (int, float)) and math.isfinite(value)
