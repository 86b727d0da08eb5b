"""EnvSpec: what identifies a built environment (repository snapshot + interpreter + install recipe).

The interpreter is the spec's ``python`` version and, when pinned, the interpreter layer (``interpreter``: the
content hash of a relocated install) the env is built on.

Many tasks share one environment; its key is a hash of the canonical JSON of the spec, so two specs that
would build the same layer get the same key and the layer is built once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from swebox.envs.sandbox.strict import strict_from_dict

_PYPI = re.compile(r"^pypi:(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_PYTHON = re.compile(r"^3\.\d+(\.\d+)?$")
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_INTERPRETER = re.compile(r"^python-3\.\d+\.\d+-[0-9a-f]{20}$")


def source_kind(source: str) -> str:
    """``"pypi"``, ``"local"`` (an absolute path to a git repository) or ``"git"`` (a ``git+`` URL)."""
    if source.startswith("pypi:"):
        return "pypi"
    if source.startswith("git+"):
        return "git"
    if source.startswith("/"):
        return "local"
    raise ValueError(
        f"EnvSpec.source: expected 'pypi:NAME==VERSION', an absolute path to a local git repository or "
        f"'git+https://...'; found {source!r}. Fix the task's env.source."
    )


def parse_pypi(source: str) -> tuple[str, str]:
    """``"pypi:toolz==1.0.0"`` -> ``("toolz", "1.0.0")``."""
    match = _PYPI.match(source)
    if not match:
        raise ValueError(
            f"EnvSpec.source: expected 'pypi:NAME==VERSION' with an exact pin; found {source!r}. "
            f"Pin one version, e.g. 'pypi:toolz==1.0.0'."
        )
    return match["name"], match["version"]


def _str_tuple(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"EnvSpec.{name}: expected a list of strings (one command or requirement each); found {value!r}."
        )
    return tuple(value)


@dataclass(frozen=True)
class EnvSpec:
    """The identity of an environment layer: repository snapshot, interpreter, install recipe."""

    source: str
    """'pypi:toolz==1.2.0' | '/abs/path/to/local/git/repo' | 'git+https://...' (online only)."""
    commit: str = ""
    """Git snapshot for local/git sources; '' for pypi (the pinned version is the snapshot)."""
    python: str = "3.11"
    """Interpreter version, '3.11' (any 3.11.x on the host) or '3.11.7' (exactly that one)."""
    install: tuple[str, ...] = ("pip install -e .",)
    """Shell commands run in /testbed with /venv activated."""
    test_deps: tuple[str, ...] = ("pytest",)
    """Extra pip requirements for the test runner."""
    setup: tuple[str, ...] = field(default=())
    """Extra shell commands after install (per-project recipes)."""
    toolchains: tuple[str, ...] = ()
    """Toolchain layers (``cache.toolchains``: 'node', 'go', 'rust', 'jdk', 'cc') stacked under the env layer,
    with their environment variables, in its build and in every episode and grade. Part of the key only when
    non-empty, so the keys of specs without toolchains stay what they were."""
    interpreter: str = ""
    """The interpreter layer the env is built on, by key ('python-3.9.18-<20 hex>': the hash of its relocated
    tree, :mod:`.pythons`), or '' (the builder chooses one matching ``python``). Set, it is part of the key:
    two specs that differ only in the interpreter build (another patch release, the same version built
    differently) get two env layers, and the build uses exactly that layer. Part of the key only when
    non-empty, so the keys of specs without it stay what they were (the builder records the interpreter it
    chose in the manifest and refuses to reuse the layer for another one: ``builder.InterpreterMismatch``)."""

    def __post_init__(self) -> None:
        for name in ("install", "test_deps", "setup", "toolchains"):
            object.__setattr__(self, name, _str_tuple(name, getattr(self, name)))
        kind = source_kind(self.source)
        if kind == "pypi":
            parse_pypi(self.source)
            if self.commit:
                raise ValueError(
                    f"EnvSpec.commit: expected '' for a PyPI source (the version pin is the snapshot); "
                    f"found {self.commit!r}. Drop the commit."
                )
        elif not _COMMIT.match(self.commit):
            raise ValueError(
                f"EnvSpec.commit: expected a hex commit id (7-64 chars) for a git source {self.source!r}; "
                f"found {self.commit!r}. Pin the snapshot, e.g. `git -C REPO rev-parse HEAD`."
            )
        if not _PYTHON.match(self.python):
            raise ValueError(f"EnvSpec.python: expected a version like '3.11' or '3.11.7'; found {self.python!r}.")
        if self.interpreter:
            version = self.interpreter.split("-")[1] if _INTERPRETER.match(self.interpreter) else ""
            if version.split(".")[: len(self.python.split("."))] != self.python.split("."):
                raise ValueError(
                    f"EnvSpec.interpreter: expected the key of an interpreter layer of Python {self.python} "
                    f"('python-{self.python}...-<20 hex>', `swebox cache python list`); found {self.interpreter!r}. "
                    "Name a layer of the spec's version, or leave it '' for the builder to choose."
                )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists; no ``toolchains`` or ``interpreter`` when empty)."""
        return {
            f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
            for f in dataclasses.fields(self)
            if (f.name != "toolchains" or self.toolchains) and (f.name != "interpreter" or self.interpreter)
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvSpec:
        """Inverse of :meth:`to_dict`; unknown or missing keys are errors that name the key."""
        return strict_from_dict(cls, d, what="EnvSpec.from_dict")

    def canonical_json(self) -> str:
        """Sorted keys, no whitespace: the bytes the key is a hash of."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        """``"env-"`` + first 20 hex digits of sha256 of the canonical JSON."""
        return "env-" + hashlib.sha256(self.canonical_json().encode()).hexdigest()[:20]
