"""fastop's boolean environment switches, read one way everywhere.

``FASTOP_DISABLE_PLUGIN_AUTOLOAD``, ``FASTOP_STRICT_PLUGINS`` and ``FASTOP_STRICT`` all
take ``1/true/yes/on`` or ``0/false/no/off`` (any case); unset or empty means off. Any
other value is an error naming the variable: a typo (``FASTOP_STRICT=ture``) must not
quietly turn a safety switch off.
"""
from __future__ import annotations

import os

__all__ = ["env_flag"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def env_flag(name: str) -> bool:
    """The boolean value of environment variable `name` (False when unset).

    Raises ValueError naming the variable and its value when it is neither.
    """
    value = os.environ.get(name, "")
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={value!r} is not a boolean: use one of "
                     f"1/true/yes/on or 0/false/no/off (any case; empty means off)")
