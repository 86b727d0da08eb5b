"""LayerStore: a folder (local disk or shared filesystem) of packed layers and their manifests.

Layout (``root/``)::

    blobs/ab/<sha256>.<format>    packed layers, content-addressed (identical layers are stored once)
    manifests/<key>.json          one per complete layer; written last, so its presence means "complete"
    logs/<key>.log                the build log
    failed/<key>.json             a build that failed for a reason in its spec (with the log tail)
    locks/<key>.lock              fcntl locks: one builder per key across processes and Ray workers
    tmp/                          packing in progress (same filesystem as blobs/, so rename is atomic)
    images/<name>.json            container images made of layers (``cache.images``); gc keeps their layers
    downloads/<name>/             registry pulls in progress (kept for a resumed pull until gc)

Publication: pack into tmp/, fsync, rename into blobs/, then write the manifest the same way. A crash, a
SIGKILL or a full disk at any point leaves at most a stray file in tmp/ or an unreferenced blob, never a
manifest without a complete blob; ``gc`` sweeps the strays.

Owners: packed files belong to the uid the sandbox maps to its root (``LayerStore.owner``): root's sandboxes
map 0 to MAPPED_ROOT_UID, a rootless one maps only the invoking user, so by default a store opened by a
non-root user packs every file as that user's. A squashfs layer records the uid in ``meta['owner']``, so a
rootless node refuses, with how to fix it, a layer packed for someone else (its files would be unmapped:
read-only ``nobody`` in the sandbox).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from swebox.envs.sandbox.layers import read_record

from .manifest import Manifest
from .packing import FORMATS, MAPPED_ROOT_UID, PackResult, check_format, fsync_path, pack, sha256_file

ORPHAN_GRACE_S = 600.0
"""Unreferenced blobs younger than this may belong to a publish in progress; gc leaves them."""


class BuildFailure(RuntimeError):
    """A build that failed because of its spec (e.g. pip install failed); recorded, not retried forever."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class LayerBuildFailed(RuntimeError):
    """The key has a recorded failed build; pass force=True (``--force``) to try again."""


class LayerCorruptError(RuntimeError):
    """A packed layer's bytes do not match its manifest."""


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    fsync_path(path.parent)


def default_owner() -> int:
    """The uid a sandbox started by this process maps to its root: MAPPED_ROOT_UID as root, else our own."""
    return MAPPED_ROOT_UID if os.geteuid() == 0 else os.geteuid()


def disk_full_hint(exc: OSError, what: str, root: Path) -> OSError:
    if exc.errno == errno.ENOSPC:
        return OSError(
            errno.ENOSPC,
            f"disk full while {what} in {root}: nothing was published; free space "
            f"(e.g. `swebox cache gc --keep-gb 20`) and build again",
        )
    return exc


class LayerStore:
    """Packed layers + manifests in a folder; see the module docstring for the layout."""

    def __init__(self, root: str | Path, fmt: str = "squashfs", owner: int | None | str = "default") -> None:
        """``owner``: the uid packed files get ('default': :func:`default_owner`; None keeps their owners)."""
        self.root = Path(root).absolute()
        self.fmt = check_format(fmt)
        self.owner = default_owner() if owner == "default" else owner
        for sub in ("blobs", "manifests", "logs", "failed", "locks", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LayerStore({str(self.root)!r}, fmt={self.fmt!r})"

    # ---- reading
    def get(self, key: str) -> Manifest | None:
        path = self.root / "manifests" / f"{key}.json"
        try:
            return Manifest.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            return None

    def require(self, key: str) -> Manifest:
        manifest = self.get(key)
        if manifest is None:
            failure = self.failure(key)
            why = f"its last build failed: {failure['error']}" if failure else "it was never built"
            raise KeyError(f"layer {key} is not in the store {self.root} ({why}); run `swebox cache build`.")
        return manifest

    def blob_path(self, manifest: Manifest) -> Path:
        return self.root / manifest.blob

    def ls(self) -> list[Manifest]:
        found = (self.get(p.stem) for p in sorted((self.root / "manifests").glob("*.json")))
        return [m for m in found if m is not None]

    def touch(self, key: str) -> None:
        """Mark a layer as used now (the manifest's mtime orders gc's least-recently-used eviction)."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.root / "manifests" / f"{key}.json")

    # ---- failures
    def failure(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / "failed" / f"{key}.json").read_text())
        except FileNotFoundError:
            return None

    def mark_failed(self, key: str, error: str, log: str = "", tail_lines: int = 40) -> None:
        tail = "\n".join(log.splitlines()[-tail_lines:])
        record = {"key": key, "error": error, "log_tail": tail, "time": time.time()}
        write_atomic(self.root / "failed" / f"{key}.json", json.dumps(record, indent=1).encode())
        if log:
            write_atomic(self.root / "logs" / f"{key}.log", log.encode())

    def clear_failure(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / "failed" / f"{key}.json").unlink()

    # ---- writing
    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Exclusive per-key lock shared by every process that uses this store folder."""
        with open(self.root / "locks" / f"{key}.lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def publish(
        self,
        key: str,
        layer_dir: str | Path,
        *,
        kind: str = "layer",
        parent: str = "",
        meta: dict[str, Any] | None = None,
        log: str = "",
        include: Sequence[str] | None = None,
        fmt: str | None = None,
    ) -> Manifest:
        """Pack ``layer_dir`` and publish it under ``key`` atomically. Call with :meth:`lock` held.

        The interpreters recorded beside ``layer_dir`` by its maker (``Layer.interpreters``) go into the
        manifest, as the builder's do: what the node copy's sandboxes may bind."""
        fmt = check_format(fmt or self.fmt)
        recorded = read_record(Path(layer_dir))
        if recorded and "interpreters" not in (meta or {}):
            meta = {**(meta or {}), "interpreters": list(recorded)}
        tmp = self.tmp_path(key, fmt)
        try:
            packed = pack(Path(layer_dir), tmp, fmt, owner=self.owner, include=include)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise disk_full_hint(e, f"publishing layer {key}", self.root) from e
        return self.publish_packed(key, packed, fmt, kind=kind, parent=parent, meta=meta, log=log)

    def tmp_path(self, key: str, suffix: str) -> Path:
        """A fresh temporary path in tmp/ for ``key`` (gc removes it once the key's lock is free)."""
        return self.root / "tmp" / f"{key}.{os.getpid()}.{time.monotonic_ns()}.{suffix}"

    def publish_packed(
        self,
        key: str,
        packed: PackResult,
        fmt: str,
        *,
        kind: str = "layer",
        parent: str = "",
        meta: dict[str, Any] | None = None,
        log: str = "",
    ) -> Manifest:
        """Publish an already packed, fsync'd file in tmp/ (made by :func:`pack` or by a converter) under
        ``key``: rename it into blobs/, then write the manifest. Call with :meth:`lock` held."""
        tmp = packed.path
        try:
            manifest = Manifest(
                key=key,
                format=check_format(fmt),
                sha256=packed.sha256,
                size=packed.size,
                files=packed.files,
                tree_bytes=packed.tree_bytes,
                created=time.time(),
                build_log=f"logs/{key}.log" if log else "",
                kind=kind,
                parent=parent,
                meta=dict(meta or {}),
            )
            if fmt == "squashfs" and self.owner is not None:
                manifest.meta.setdefault("owner", self.owner)  # the uid baked into the image (module docstring)
            blob = self.blob_path(manifest)
            blob.parent.mkdir(exist_ok=True)
            os.rename(tmp, blob)  # an identical blob already there is replaced by identical bytes
            fsync_path(blob.parent)
            if log:
                write_atomic(self.root / "logs" / f"{key}.log", log.encode())
            self._write_manifest(manifest)
        except OSError as e:
            raise disk_full_hint(e, f"publishing layer {key}", self.root) from e
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self.clear_failure(key)
        return manifest

    def _write_manifest(self, manifest: Manifest) -> None:
        data = json.dumps(manifest.to_dict(), indent=1, sort_keys=True).encode()
        write_atomic(self.root / "manifests" / f"{manifest.key}.json", data)

    def build(
        self, key: str, build_fn: Callable[[Callable[..., Manifest]], Manifest], *, force: bool = False
    ) -> Manifest:
        """Build ``key`` once across processes: lock, reuse if present, else build and publish.

        ``build_fn(publish)`` builds the layer and calls ``publish(layer_dir=..., kind=..., log=...)``
        (the keyword arguments of :meth:`publish`) while its build folder still exists, returning the
        manifest. A :class:`BuildFailure` it raises is recorded; the key then fails fast until ``force``.
        Other errors (disk full, interrupts) are not recorded: they say nothing about the spec.
        """
        with self.lock(key):
            manifest = self.get(key)
            if manifest is not None and not force:
                return manifest
            failure = self.failure(key)
            if failure is not None and not force:
                raise LayerBuildFailed(
                    f"layer {key} failed to build before: {failure['error']}\n--- build log tail ---\n"
                    f"{failure['log_tail']}\n(fix the spec, or retry with --force / force=True)"
                )
            try:
                return build_fn(lambda **publish_args: self.publish(key, **publish_args))
            except BuildFailure as e:
                self.mark_failed(key, str(e), e.log)
                raise

    def remove(self, key: str) -> None:
        """Delete a layer's manifest and log, and its blob unless another manifest shares it."""
        manifest = self.get(key)
        with contextlib.suppress(FileNotFoundError):
            (self.root / "manifests" / f"{key}.json").unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.root / "logs" / f"{key}.log").unlink()
        if manifest is not None and all(m.sha256 != manifest.sha256 for m in self.ls()):
            with contextlib.suppress(FileNotFoundError):
                self.blob_path(manifest).unlink()

    # ---- maintenance
    def verify(self, keys: Iterable[str] | None = None, remove_bad: bool = False) -> list[tuple[str, str]]:
        """Re-hash blobs; returns ``(key, problem)`` for each bad layer (removed when ``remove_bad``)."""
        manifests = self.ls() if keys is None else [self.require(k) for k in keys]
        bad = []
        for m in manifests:
            path = self.blob_path(m)
            if not path.exists():
                bad.append((m.key, f"missing blob {path}"))
            elif path.stat().st_size != m.size:
                bad.append((m.key, f"{path} has {path.stat().st_size} bytes, manifest says {m.size}"))
            elif sha256_file(path) != m.sha256:
                bad.append((m.key, f"{path} sha256 differs from the manifest"))
        if remove_bad:
            for key, _ in bad:
                self.remove(key)
        return bad

    def image_layers(self) -> set[str]:
        """Keys of the layers that the store's images (``images/*.json``, written by ``cache.images``) use:
        gc never evicts them while the image is recorded."""
        keys: set[str] = set()
        for path in (self.root / "images").glob("*.json"):
            with contextlib.suppress(FileNotFoundError, ValueError):
                record = json.loads(path.read_text())
                keys.update(record.get("layers", []))
                keys.update([record["runtime_layer"]] if record.get("runtime_layer") else [])
        return keys

    def toolchain_layers(self) -> set[str]:
        """Keys of the toolchain layers that the store's env layers were built on (``meta["toolchains"]``): gc
        keeps them while such an env is stored, as episodes stack them under it."""
        return {key for m in self.ls() for key in (m.meta.get("toolchains") or {}).values()}

    def total_bytes(self) -> int:
        return sum(m.size for m in {m.sha256: m for m in self.ls()}.values())

    def gc(self, keep_bytes: int, protect: Iterable[str] = ()) -> list[str]:
        """Sweep stray temporaries and unreferenced blobs, then evict least-recently-used layers until
        the store holds at most ``keep_bytes`` (never an image's layers, nor a stored env's toolchain layers).
        Returns the removed keys."""
        for tmp in (self.root / "tmp").iterdir():
            self._remove_stray_tmp(tmp)
        for download in (self.root / "downloads").glob("*"):  # registry pulls that were interrupted
            self._remove_stray_tmp(download)
        referenced = {m.blob for m in self.ls()}
        for blob in (self.root / "blobs").glob("*/*"):
            rel = blob.relative_to(self.root).as_posix()
            if rel not in referenced and time.time() - blob.stat().st_mtime > ORPHAN_GRACE_S:
                blob.unlink()
        with self.images_lock(exclusive=True):  # an image import in progress has layers but no record yet
            keep = set(protect) | self.image_layers() | self.toolchain_layers()
            by_age = sorted(self.ls(), key=lambda m: (self.root / "manifests" / f"{m.key}.json").stat().st_mtime)
            removed = []
            for m in by_age:
                if self.total_bytes() <= keep_bytes:
                    break
                if m.key not in keep:
                    with self.lock(m.key):
                        self.remove(m.key)
                    removed.append(m.key)
        return removed

    @contextlib.contextmanager
    def images_lock(self, exclusive: bool = False) -> Iterator[None]:
        """Shared while an image is imported (its layers land before its record), exclusive while gc evicts."""
        with open(self.root / "locks" / "_images.lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _remove_stray_tmp(self, tmp: Path) -> None:
        key = tmp.name.lstrip(".").split(".")[0]
        with open(self.root / "locks" / f"{key}.lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a build of this key is running: its temporary is live
            if tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


def available_formats() -> tuple[str, ...]:
    """Formats this host can pack: squashfs needs mksquashfs; tar formats need tar + zstd/gzip."""
    return tuple(f for f in FORMATS if f != "squashfs" or shutil.which("mksquashfs"))
