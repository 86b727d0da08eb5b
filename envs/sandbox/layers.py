"""Layers: read-only directory trees stacked to form a sandbox's root filesystem (lowest first)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .policy import SandboxError

RECORD_SUFFIX = ".layer.json"
"""A layer folder `X` may have a record `X.layer.json` beside it (never inside it: a layer's tree is made by
code the sandbox ran, its record by the host), written by whoever made the layer (the env builder, the cache)."""


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

    interpreters: tuple[str, ...] | None = None
    """Host folders (interpreter prefixes) the layer's virtualenvs need, bound read-only into its sandboxes.
    Declared by the layer's maker, never discovered in the tree (a tree can hold an agent-written pyvenv.cfg
    naming any host folder); None reads the record beside the folder (`write_record`), or () without one."""

    _users: int = field(default=0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        # an unused snapshot is deleted when garbage-collected or at interpreter exit
        self._cleanup = weakref.finalize(self, _remove, str(self.path)) if self.ephemeral else None
        if self.archive is not None:
            self.archive = Path(self.archive)
        self.name = self.name or self.path.name
        if self.interpreters is None:
            self.interpreters = read_record(self.path)
        self.interpreters = tuple(_checked_prefixes(self.interpreters, f"layer {self.name!r}"))

    @classmethod
    def of(cls, value: str | os.PathLike | Layer) -> Layer:
        return value if isinstance(value, Layer) else cls(Path(value))

    def check(self) -> None:
        if not self.path.is_dir():
            found = "a file" if self.path.exists() else "nothing"
            raise SandboxError(
                f"layer {self.name!r}: expected a directory at {self.path}, found {found}; "
                "pass the folder whose contents form the sandbox's root (e.g. one holding testbed/)"
            )
        if self.archive is not None and not self.archive.is_file():
            raise SandboxError(f"layer {self.name!r}: archive {self.archive} does not exist")

    def persist(self) -> Layer:
        """Keep this snapshot after its sandboxes close (the caller now owns the folder, and its record beside it:
        the folder given by path to a later Sandbox brings the same interpreters)."""
        self.ephemeral = False
        if self._cleanup is not None:
            self._cleanup.detach()
        if self.interpreters:
            write_record(self.path, self.interpreters)
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

    def discard_if_unused(self) -> None:
        """Remove an ephemeral snapshot no sandbox took (every child of a fork failed to start): nobody else
        would release it."""
        with self._lock:
            unused = self._users == 0
        if unused:
            self.acquire()
            self.release()


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    record_path(folder).unlink(missing_ok=True)


def record_path(folder: str | os.PathLike) -> Path:
    folder = Path(folder)
    return folder.with_name(folder.name + RECORD_SUFFIX)


def write_record(folder: str | os.PathLike, interpreters: Sequence[str]) -> None:
    """Record, beside the layer `folder`, the host interpreter prefixes its virtualenvs need (atomically)."""
    target = record_path(folder)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"interpreters": _checked_prefixes(interpreters, str(folder))}) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)


def read_record(folder: Path) -> tuple[str, ...]:
    """The interpreters recorded beside `folder` (beside the folder a symlink names: a folder of layer links
    named by key shares the layers' records); () when there is no record."""
    path = record_path(os.path.realpath(folder))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ()
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"layer record {path}: expected a regular file owned by uid {os.geteuid()} and "
            f"writable by nobody else, found mode {stat.filemode(st.st_mode)} uid {st.st_uid}; "
            "remove it and record the layer again (swebox.envs.sandbox.layers.write_record)"
        )
    try:
        data = json.loads(path.read_text())
        return tuple(data["interpreters"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SandboxError(
            f"layer record {path}: expected JSON {{\"interpreters\": [prefix, ...]}}, could not "
            f"read it ({exc}); remove it and record the layer again"
        ) from None


def _checked_prefixes(prefixes: Sequence[str], owner: str) -> list[str]:
    if isinstance(prefixes, str):
        prefixes = [prefixes]
    checked = []
    for prefix in prefixes:
        if not isinstance(prefix, str) or not os.path.isabs(prefix) or ".." in prefix.split("/"):
            raise SandboxError(f"{owner}: interpreters must be absolute host paths without '..', found {prefix!r}")
        checked.append(os.path.normpath(prefix))
    return checked


def interpreter_prefix(executable: str) -> str:
    """The folder to bind for an interpreter executable (its prefix: /opt/py/3.11.7 for .../bin/python3.11)."""
    home = os.path.dirname(os.path.normpath(executable))
    return os.path.dirname(home) if os.path.basename(home) == "bin" else home
