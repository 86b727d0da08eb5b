"""Provenance: what produced a verdict, so that it can be reproduced (or told apart) months later.

:func:`provenance` stamps every grade report (and through it every episode's final info, trajectory and eval
record): the task's id and content digest, each layer's key and digest, the grader (kind, swebox's version,
swebench's version and the log parser for log graders), the dataset file's digest and row the task came from,
and the sandbox policy's digest. docs/tasks.md ("Provenance") lists the fields.

Digests are SHA-256 hex of canonical JSON (sorted keys), or of file bytes. A layer from the layer cache is named
``<key>.<first 16 hex of its packed file's sha256>`` (envs/cache/layer_cache.py), which is what it records; a
plain layer folder (tests, ``--layers DIR``) is hashed (names, modes, link targets and contents) once per
process when it is small, and recorded by path only when it is not.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import stat
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from swebox.envs.sandbox import SandboxError
from swebox.envs.sandbox.layers import read_record
from swebox.envs.tasks.schema import Task

FORMAT = 1
_ORIGIN = "_swebox_origin"  # an attribute outside the dataclass fields: not part of the task's content
_NODE_LAYER = re.compile(r"^((?:env|task|interp|image|py)[\w-]*?-[0-9a-f]{8,})\.([0-9a-f]{16})$")
MAX_HASHED_FILES = 5000
MAX_HASHED_BYTES = 256 << 20
_lock = threading.Lock()
_folder_digests: dict[tuple[str, int], dict[str, Any]] = {}
_file_digests: dict[tuple[str, int, int], str] = {}


def canonical_digest(value: Any) -> str:
    """SHA-256 hex of ``value`` as canonical JSON (sorted keys, no spaces; non-JSON values by str)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def task_digest(task: Task) -> str:
    """The task's content digest: every field of the row (where it was loaded from is not content)."""
    return canonical_digest(task.to_dict())


def file_digest(path: str | Path) -> str:
    """SHA-256 hex of a file's bytes, once per process per (path, size, mtime)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _file_digests:
            return _file_digests[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    with _lock:
        _file_digests[key] = digest.hexdigest()
    return _file_digests[key]


def source_digest(source: str | Path) -> str | None:
    """The digest of a dataset source: a file's bytes, a folder's files (names and bytes, sorted); None for a
    Hugging Face dataset name (its revision is not known here)."""
    path = Path(source)
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return canonical_digest([[str(p.relative_to(path)), file_digest(p)] for p in files])
    return None


def set_origin(task: Task, source: str | Path, digest: str | None, row: int) -> Task:
    """Record where ``task`` was loaded from (by :func:`swebox.envs.tasks.load`); not part of its content, so
    equality and :func:`task_digest` ignore it. It travels with the object (pickling keeps it)."""
    object.__setattr__(task, _ORIGIN, {"source": str(source), "sha256": digest, "row": row})
    return task


def origin(task: Task) -> dict[str, Any] | None:
    """{source, sha256, row} of the dataset row ``task`` was loaded from; None when not loaded from one."""
    found = getattr(task, _ORIGIN, None)
    return dict(found) if found else None


@functools.cache
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def swebox_version() -> str | None:
    """The installed swebox's version (None when it runs from a tree that is not installed)."""
    return _version("swebox")


def datasets(tasks: Any) -> list[dict[str, Any]]:
    """The distinct dataset sources (source, sha256) the tasks were loaded from."""
    found = {(o["source"], o["sha256"]) for t in tasks if (o := origin(t))}
    return [{"source": s, "sha256": d} for s, d in sorted(found, key=str)]


def _hash_folder(root: Path) -> str | None:
    """Names, modes, link targets and file bytes under ``root``; None when over the size limits."""
    digest, count, size = hashlib.sha256(), 0, 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + dirs:
            p = Path(folder, name)
            st = os.lstat(p)
            count += 1
            if count > MAX_HASHED_FILES:
                return None
            digest.update(f"{p.relative_to(root)}\0{stat.S_IMODE(st.st_mode):o}\0".encode("utf-8", "surrogateescape"))
            if stat.S_ISLNK(st.st_mode):
                digest.update(os.readlink(p).encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(st.st_mode):
                size += st.st_size
                if size > MAX_HASHED_BYTES:
                    return None
                digest.update(file_digest(p).encode())
    return digest.hexdigest()


def interpreter_record(prefix: str) -> dict[str, Any]:
    """{prefix, python_sha256}: a host interpreter a layer's venv runs on, by its executable's bytes."""
    out: dict[str, Any] = {"prefix": prefix}
    try:
        exe = sorted(p for p in Path(prefix, "bin").glob("python3*") if p.is_file() and "-config" not in p.name)
        out["python_sha256"] = file_digest(os.path.realpath(exe[0])) if exe else None
    except OSError as exc:
        out["note"] = f"not hashed: {type(exc).__name__}: {exc}"
    return out


def layer_record(layer: Any) -> dict[str, Any]:
    """{path, key, sha256_prefix | tree_sha256, interpreters} of one layer folder (a snapshot: its path)."""
    path = Path(str(getattr(layer, "path", layer)))
    record: dict[str, Any] = {"path": str(path)}
    try:  # the host interpreters a layer's venv needs are recorded beside it (envs/sandbox/layers.py)
        prefixes = read_record(path)
    except (SandboxError, OSError):
        prefixes = ()
    if prefixes:
        record["interpreters"] = [interpreter_record(p) for p in prefixes]
    node = _NODE_LAYER.match(path.name)
    if node:  # a layer of the node cache: its name holds the key and its packed file's digest
        record.update(key=node.group(1), sha256_prefix=node.group(2))
        return record
    if re.match(r"^(?:env|task|interp|image|py)[\w-]*-[0-9a-f]{8,}$", path.name):
        record["key"] = path.name  # a --layers DIR folder, named by its key
    try:
        st = os.stat(path)
        key = (str(path.resolve()), st.st_mtime_ns)
        with _lock:
            cached = _folder_digests.get(key)
        if cached is None:
            tree = _hash_folder(path) if path.is_dir() else None
            cached = {"tree_sha256": tree} if tree else {"note": "not hashed: larger than the provenance limits"}
            with _lock:
                _folder_digests[key] = cached
        record.update(cached)
    except OSError as exc:
        record["note"] = f"not hashed: {type(exc).__name__}: {exc}"
    return record


def grader_record(task: Task) -> dict[str, Any]:
    """The grader: its kind, swebox's version, and for log graders swebench's version, the parser and whether a
    rewarded log verdict is confirmed under swebox's runner (``Task.confirm_mode``)."""
    out: dict[str, Any] = {"kind": task.grader, "swebox": swebox_version()}
    if task.grader == "log":
        out.update(swebench=_version("swebench"), log_parser=task.log_parser, confirm=task.confirm_mode)
    return out


def policy_digest(policy: Any) -> str:
    """Digest of a SandboxPolicy (or its dict): every field, defaults included."""
    instance = dataclasses.is_dataclass(policy) and not isinstance(policy, type)
    data = (
        policy.to_dict()
        if hasattr(policy, "to_dict")
        else (dataclasses.asdict(policy) if instance else dict(policy or {}))
    )
    return canonical_digest(data)


def provenance(task: Task, layers: list, policy: Any) -> dict[str, Any]:
    """Everything that produced a verdict for ``task`` over ``layers`` under ``policy`` (see the module doc)."""
    return {
        "format": FORMAT,
        "task": {"id": task.instance_id, "sha256": task_digest(task)},
        "layers": [layer_record(layer) for layer in layers],
        "grader": grader_record(task),
        "dataset": origin(task),
        "sandbox_policy_sha256": policy_digest(policy),
    }
