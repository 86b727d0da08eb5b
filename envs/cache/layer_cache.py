"""LayerCache: make stored layers available on this node as directories a Sandbox can stack.

squashfs layers are copied to node-local disk (hashing on the way) and mounted read-only: kernel
``mount -t squashfs -o loop`` as root, ``squashfuse`` otherwise; there is no unpack, and every sandbox on
the node shares the mount's page cache. tar layers are hashed, vetted and unpacked once into a
node-local folder. Either way it happens once per node, under the I/O budget; every later use is free.

Node-local layout (``root/``), every name keyed by the layer's *node key* ``<key>.<first 16 hex of its
sha256>`` (:func:`node_key`), so that stores which built one key differently (two runs, two users, a rebuild)
share a node cache without breaking each other's episodes: each build is materialised under its own name::

    blobs/<node key>.squashfs local copies of squashfs images (the mount source)
    layers/<node key>/        the mountpoint or unpacked tree handed to Sandbox
    state/<node key>.json     what is materialised (its store key too); the file's mtime is its last use (LRU)
    locks/<node key>.lock     exclusive while a process materialises or evicts it
    users/<node key>.lock     shared-locked by every live user of it, in any process

A layer whose users/ lock can be taken exclusively has no live user, so quota eviction may remove it;
a process that dies releases its locks with it, so crashed users never pin a layer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..sandbox.layers import interpreter_prefix, read_record, record_path, write_record
from .budget import DEFAULT_BUDGET_MB, IOBudget
from .layer_owner import check_owner
from .manifest import Manifest
from .packing import sha256_file, unpack, vet_squashfs
from .store import LayerCorruptError, LayerStore

GB = 1_000_000_000


def default_root() -> Path:
    """Node-local cache folder: $SWEBOX_LAYER_CACHE, else a per-user folder under /var/tmp."""
    return Path(os.environ.get("SWEBOX_LAYER_CACHE") or f"/var/tmp/swebox-layers-{os.getuid()}")


@dataclass
class LayerCacheConfig:
    """Where and how much this node keeps materialised."""

    root: str = ""
    """Node-local folder ('' = default_root()); never a shared filesystem (mounts and locks live here)."""
    quota_gb: float = 50.0
    """Most bytes of materialised layers kept; least-recently-used layers without users are evicted."""
    io_budget_mb: int = DEFAULT_BUDGET_MB
    """Archive MB being copied or unpacked at once in this process (the paper's 2,000 MB)."""
    mount: str = "auto"
    """How squashfs layers are mounted: 'auto' (kernel as root, else squashfuse), 'kernel', 'squashfuse'."""

    def __post_init__(self) -> None:
        if self.quota_gb <= 0:
            raise ValueError(f"LayerCacheConfig.quota_gb: expected > 0; found {self.quota_gb}.")
        if self.mount not in ("auto", "kernel", "squashfuse"):
            raise ValueError(
                f"LayerCacheConfig.mount: expected 'auto', 'kernel' or 'squashfuse'; found {self.mount!r}."
            )
        self.root = str(Path(self.root or default_root()).absolute())


def node_key(manifest: Manifest) -> str:
    """The node-local name of one build of a layer: its key and the start of its content digest."""
    return f"{manifest.key}.{manifest.sha256[:16]}"


def _node_of(state: dict[str, Any]) -> str:
    return state.get("node_key", state["key"])  # records written before node keys named the store key


class QuotaError(RuntimeError):
    """The layers in use on this node leave no room for another one under the quota."""


@dataclass
class LayerHandle:
    """A layer in use: ``path`` is the directory to give to Sandbox. Release it (or use ``with``)."""

    key: str
    path: Path
    manifest: Manifest
    _lock_file: IO[Any] | None = field(default=None, repr=False)
    _on_release: Callable[[LayerHandle], None] | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # drops the shared users/ lock
            self._lock_file = None
            if self._on_release:
                self._on_release(self)

    def __enter__(self) -> LayerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LayerCache:
    """Node-local materialisation of a LayerStore's layers, with quota, LRU eviction and I/O budget."""

    def __init__(
        self,
        store: LayerStore,
        config: LayerCacheConfig | None = None,
        *,
        budget: IOBudget | None = None,
        rebuild: Callable[[str], Manifest] | None = None,
    ) -> None:
        self.store = store
        self.config = config or LayerCacheConfig()
        self.root = Path(self.config.root)
        self.budget = budget or IOBudget(self.config.io_budget_mb)
        self.rebuild = rebuild
        """Called with a key whose stored blob is corrupt (after it is removed from the store)."""
        self._handles: list[LayerHandle] = []
        for sub in ("blobs", "layers", "state", "locks", "users"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # ---- public API
    def acquire(self, key: str) -> LayerHandle:
        """Make ``key`` (the store's current build of it) available on this node (once) and hold it until the
        handle is released."""
        manifest = self.store.require(key)
        check_owner(manifest, self.store.root)
        for attempt in range(3):
            node = node_key(manifest)
            with self._locked(node):
                try:
                    self._ensure(manifest, node)
                except LayerCorruptError:
                    self._forget(node)
                    if attempt == 2:
                        raise
                else:
                    self._record_interpreters(manifest, node)
                    users = open(self.root / "users" / f"{node}.lock", "a+")  # noqa: SIM115 - held by the handle
                    fcntl.flock(users, fcntl.LOCK_SH)
                    break
            manifest = self._after_corrupt_blob(manifest)
        os.utime(self._state_path(node))
        handle = LayerHandle(key, self.root / "layers" / node, manifest, users, self._handles.remove)
        self._handles.append(handle)
        return handle

    def materialised(self) -> list[dict[str, Any]]:
        """State records of every layer materialised on this node (one another process removes meanwhile is
        left out: a stale layer is dropped under its own key's lock, not the quota's)."""
        states = []
        for path in sorted((self.root / "state").glob("*.json")):
            with contextlib.suppress(FileNotFoundError):
                states.append(json.loads(path.read_text()))
        return states

    def evict(self, key: str) -> bool:
        """Remove every build of ``key`` from this node that no process uses; True when none is left."""
        nodes = [_node_of(s) for s in self.materialised() if s["key"] == key] or [key]
        return all([self._evict_node(node) for node in nodes])

    def _evict_node(self, node: str) -> bool:
        with self._locked(node, blocking=False) as got:
            return got and self._drop_if_unused(node)

    def close(self) -> None:
        """Release this cache's handles and unmount every squashfs layer that no process uses."""
        for handle in list(self._handles):
            handle.release()
        for state in self.materialised():
            if state["format"] != "squashfs":
                continue
            node = _node_of(state)
            with self._locked(node, blocking=False) as got, self._unused(node) as free:
                if got and free:
                    self._unmount(self.root / "layers" / node, state.get("mount", "kernel"))

    def __enter__(self) -> LayerCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- locks and state
    @contextlib.contextmanager
    def _locked(self, key: str, blocking: bool = True) -> Iterator[bool]:
        with open(self.root / "locks" / f"{key}.lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True

    @contextlib.contextmanager
    def _unused(self, key: str) -> Iterator[bool]:
        """True (holding an exclusive users/ lock) when no process holds the key."""
        with open(self.root / "users" / f"{key}.lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True

    def _state_path(self, key: str) -> Path:
        return self.root / "state" / f"{key}.json"

    def _last_used(self, key: str) -> float:
        """When ``key`` was last acquired (its record's mtime); 0.0 when the record is gone already."""
        try:
            return self._state_path(key).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def _read_state(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._state_path(key).read_text())
        except FileNotFoundError:
            return None

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self._state_path(_node_of(state)).with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.rename(tmp, self._state_path(_node_of(state)))

    # ---- materialisation (called with the node key's lock held)
    def _record_interpreters(self, manifest: Manifest, node: str) -> None:
        """Beside the layer folder, the interpreters its builder recorded in the manifest: what its sandboxes
        bind (a pyvenv.cfg in the tree is never trusted for that, see Layer.interpreters)."""
        prefixes = manifest.meta.get("interpreters")
        if prefixes is None and manifest.meta.get("interpreter"):  # manifests of builders before issue 11
            prefixes = [interpreter_prefix(manifest.meta["interpreter"])]
        target = self.root / "layers" / node
        if prefixes and read_record(target) != tuple(prefixes):
            write_record(target, prefixes)

    def _ensure(self, manifest: Manifest, node: str) -> None:
        """``node`` (this build of the layer) is ready on this node; raises LayerCorruptError for a bad copy."""
        state = self._read_state(node)
        if state and state["sha256"] == manifest.sha256 and state["status"] == "ready":
            if manifest.format != "squashfs" or os.path.ismount(self.root / "layers" / node):
                return
            if self._mount_local(manifest, node, state):
                return
        if state and not self._drop_if_unused(node):
            raise RuntimeError(
                f"layer {manifest.key} on this node ({node}) is half made or lost its mount but "
                "is still in use; close the sandboxes using it first."
            )
        self._materialise(manifest, node)

    def _after_corrupt_blob(self, manifest: Manifest) -> Manifest:
        """The node copy did not match: a bad copy is fetched again; a bad stored blob is removed from the
        store and rebuilt (when a rebuild callback is set) or reported."""
        blob = self.store.blob_path(manifest)
        if blob.exists() and sha256_file(blob) == manifest.sha256:
            return manifest
        self.store.remove(manifest.key)
        if self.rebuild is None:
            raise LayerCorruptError(
                f"layer {manifest.key}: stored file {blob} is corrupt or truncated (sha256 differs from its "
                f"manifest); it was removed from the store. Rebuild it with `swebox cache build`."
            )
        return self.rebuild(manifest.key)

    def _reserve(self, manifest: Manifest, node: str, nbytes: int) -> None:
        """Evict least-recently-used unused layers until ``nbytes`` more fit, then record a reservation."""
        quota = int(self.config.quota_gb * GB)
        with self._locked("_quota"):
            others = [s for s in self.materialised() if _node_of(s) != node]
            used = sum(s["bytes"] for s in others)
            for state in sorted(others, key=lambda s: self._last_used(_node_of(s))):
                if used + nbytes <= quota:
                    break
                if self._evict_node(_node_of(state)):
                    used -= state["bytes"]
            if used + nbytes > quota:
                raise QuotaError(
                    f"layer cache {self.root}: layer {manifest.key} needs {nbytes / GB:.2f} GB but layers "
                    f"in use hold {used / GB:.2f} GB of the {self.config.quota_gb} GB quota; raise "
                    f"quota_gb or release sandboxes."
                )
            self._write_state(
                {
                    "key": manifest.key,
                    "node_key": node,
                    "sha256": manifest.sha256,
                    "format": manifest.format,
                    "bytes": nbytes,
                    "status": "materialising",
                }
            )

    def _materialise(self, manifest: Manifest, node: str) -> None:
        key, target = manifest.key, self.root / "layers" / node
        stored = self.store.blob_path(manifest)
        if not stored.exists():
            raise LayerCorruptError(f"layer {key}: stored file {stored} is missing")
        if manifest.format == "squashfs":
            self._reserve(manifest, node, manifest.size)
            with self.budget.hold(manifest.size):
                local = self._fetch_verified(manifest, stored, node)
            vet_squashfs(local)
            state = {**self._read_state(node), "status": "ready", "blob": str(local)}
            target.mkdir(exist_ok=True)
            self._mount(local, target, state)
        else:
            self._reserve(manifest, node, manifest.tree_bytes or 4 * manifest.size)
            with self.budget.hold(manifest.size):
                self._verify(stored, manifest)
                unpack(stored, target, manifest.format)
            state = {**self._read_state(node), "status": "ready"}
        self._write_state(state)

    def _verify(self, path: Path, manifest: Manifest) -> None:
        if sha256_file(path) != manifest.sha256:
            raise LayerCorruptError(f"layer {manifest.key}: {path} does not match its manifest (sha256)")

    def _fetch_verified(self, manifest: Manifest, stored: Path, node: str) -> Path:
        """Copy the stored image to node-local disk, hashing the copy; the copy is what gets mounted."""
        local = self.root / "blobs" / f"{node}.squashfs"
        fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{manifest.key}.")
        os.close(fd)
        try:
            shutil.copyfile(stored, tmp)
            self._verify(Path(tmp), manifest)
            os.rename(tmp, local)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return local

    def _mount_local(self, manifest: Manifest, node: str, state: dict[str, Any]) -> bool:
        """Re-mount a node-local image after an unmount or reboot, re-checking it first."""
        local = Path(state.get("blob", ""))
        if not local.is_file() or sha256_file(local) != manifest.sha256:
            return False
        self._mount(local, self.root / "layers" / node, state)
        return True

    def _mount(self, image: Path, target: Path, state: dict[str, Any]) -> None:
        kind = self.config.mount
        if kind == "auto":
            kind = "kernel" if os.geteuid() == 0 else "squashfuse"
        cmd = (
            ["mount", "-t", "squashfs", "-o", "loop,ro,nodev,nosuid", str(image), str(target)]
            if kind == "kernel"
            else ["squashfuse", "-o", "ro", str(image), str(target)]
        )
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"mounting {image} on {target} with {cmd[0]} failed: {proc.stderr.strip()}")
        state["mount"] = kind
        self._write_state(state)

    def _unmount(self, target: Path, kind: str) -> None:
        if os.path.ismount(target):
            cmd = ["umount", str(target)] if kind == "kernel" else ["fusermount3", "-u", str(target)]
            if subprocess.run(cmd, capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)

    def _drop_if_unused(self, key: str) -> bool:
        with self._unused(key) as free:
            if free:
                self._forget(key)
            return free

    def _forget(self, node: str) -> None:
        """Remove every trace of ``node`` (one build of a layer) on this node (mount, tree, local image, state)."""
        state = self._read_state(node) or {}
        target = self.root / "layers" / node
        self._unmount(target, state.get("mount", "kernel"))
        if target.is_dir() and not os.path.ismount(target):
            shutil.rmtree(target, ignore_errors=True)
        if state.get("blob"):
            Path(state["blob"]).unlink(missing_ok=True)
        self._state_path(node).unlink(missing_ok=True)
        record_path(target).unlink(missing_ok=True)
