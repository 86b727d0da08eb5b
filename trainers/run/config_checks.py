"""The trainer configuration's checks: one error type and the one-line message every section's invariant gives.

:mod:`swebox.trainers.run.config` (the whole config and its loading) and the sections' modules
(``config_policy``, ``config_learning``, ``config_env``, ``config_infra``) check their values through these.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Literal


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says what was expected and how to fix it."""


def check(ok: bool, key: str, expected: str, found: object, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}; found {found!r}; {fix}")


def check_literals(obj: object, section: str) -> None:
    """Literal-typed fields hold one of their values (OmegaConf checks YAML; this covers direct use)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if typing.get_origin(hints[f.name]) is Literal:
            allowed = list(typing.get_args(hints[f.name]))
            value = getattr(obj, f.name)
            check(value in allowed, f"{section}.{f.name}", f"one of {allowed}", value, "pick one of them")
