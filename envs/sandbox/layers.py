"""Layers: read-only directory trees stacked to form a sandbox's root filesystem (lowest first)."""

from __future__ import annotations

import os
import shutil
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from .policy import SandboxError

VENV_SEARCH_DEPTH = 3


@dataclass(eq=False)
class Layer:
    """One read-only layer: a directory whose contents appear at the sandbox's `/`."""

    path: Path
    """The folder holding the layer's tree (a layer folder `testbed/` appears at `/testbed`)."""

    name: str = ""
    """A label for logs and errors."""

    archive: Path | None = None
    """The same tree packed as tar.gz; the `extract` backend unpacks it on every restore (paper-style)."""

    ephemeral: bool = False
    """Made by `Sandbox.snapshot()`: deleted when the last sandbox using it closes, unless `persist()` is called."""

    _users: int = field(default=0, repr=False)
    _homes: list[str] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        # an unused snapshot is deleted when garbage-collected or at interpreter exit
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.path), True) if self.ephemeral else None
        if self.archive is not None:
            self.archive = Path(self.archive)
        self.name = self.name or self.path.name

    @classmethod
    def of(cls, value: str | os.PathLike | Layer) -> Layer:
        return value if isinstance(value, Layer) else cls(Path(value))

    def check(self) -> None:
        if not self.path.is_dir():
            found = "a file" if self.path.exists() else "nothing"
            raise SandboxError(f"layer {self.name!r}: expected a directory at {self.path}, found {found}; "
                               "pass the folder whose contents form the sandbox's root (e.g. one holding testbed/)")
        if self.archive is not None and not self.archive.is_file():
            raise SandboxError(f"layer {self.name!r}: archive {self.archive} does not exist")

    def persist(self) -> Layer:
        """Keep this snapshot after its sandboxes close (the caller now owns the folder)."""
        self.ephemeral = False
        if self._cleanup is not None:
            self._cleanup.detach()
        return self

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last and self.ephemeral and self._cleanup is not None:
            self._cleanup()

    def venv_homes(self) -> list[str]:
        """Interpreter folders that virtualenvs in this layer point to (pyvenv.cfg `home`); scanned once."""
        if self._homes is not None:
            return self._homes
        homes = []
        for cfg in _find_files(self.path, "pyvenv.cfg", VENV_SEARCH_DEPTH):
            try:
                lines = cfg.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    homes.append(value.strip())
        self._homes = homes
        return homes


def interpreter_prefix(home: str) -> str:
    """The folder to bind for an interpreter whose executable lives in `home` (its prefix, e.g. .../3.11.7)."""
    home = os.path.normpath(home)
    return os.path.dirname(home) if os.path.basename(home) == "bin" else home


def _find_files(root: Path, name: str, depth: int) -> list[Path]:
    found = []
    frontier = [root]
    for _ in range(depth + 1):
        next_frontier = []
        for folder in frontier:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.name == name and entry.is_file(follow_symlinks=False):
                    found.append(Path(entry.path))
                elif entry.is_dir(follow_symlinks=False):
                    next_frontier.append(Path(entry.path))
        frontier = next_frontier
    return found
