"""Strict dicts -> dataclasses: every key must be a field and every field without a default must be there.

The one reader of the plain dicts swebox's records travel as (policies, env specs, tasks, episode configs, layer
sources, trajectories, recipes). It lives in the sandbox, the bottom of the import stack, because the sandbox
imports nothing else of swebox and every other part may import the sandbox; it uses the standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def checked_fields(
    cls: type, data: Any, *, what: str = "", fix: str = "", error: type[Exception] = ValueError
) -> dict[str, Any]:
    """A copy of ``data`` after checking it can build dataclass ``cls``: a mapping whose keys are all fields of
    ``cls`` and that has every field without a default. Otherwise ``error`` saying what was expected, what was
    found and how to fix it (``fix``, else: fix the spelling). ``what`` names the record (default: the class)."""
    what = what or cls.__name__
    fields = dataclasses.fields(cls)
    names = sorted(f.name for f in fields)
    if not isinstance(data, Mapping):
        raise error(
            f"{what}: expected a dict (a JSON object) of its fields {names}; found "
            f"{type(data).__name__}: {data!r:.200}. {fix or 'Write `key: value` pairs.'}"
        )
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise error(
            f"{what}: unknown keys {unknown}; expected a subset of {names}. "
            f"{fix or 'Fix their spelling or remove them.'}"
        )
    missing = [
        f.name
        for f in fields
        if f.name not in data
        and f.init
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise error(
            f"{what}: missing key {missing[0]!r} (required: {missing}); found keys {sorted(data)}. Add {missing[0]!r}."
        )
    return dict(data)


def strict_from_dict(
    cls: type[T], data: Any, *, what: str = "", fix: str = "", error: type[Exception] = ValueError
) -> T:
    """``cls(**data)`` once :func:`checked_fields` accepts ``data``; an instance of ``cls`` is returned as is."""
    if isinstance(data, cls):
        return data
    return cls(**checked_fields(cls, data, what=what, fix=fix, error=error))
