"""One OCI/Docker image layer (tar, gzip or zstd) -> one content-addressed swebox layer, keyed by its digest.

No extraction, so no privilege is needed: the layer is decompressed once into store/tmp/ (hashing both the
compressed bytes and the tar stream, so the blob digest and the config's diff_id are both checked before
anything is written), its headers are read, and a normalised tar is written into the store's packer
(``tar2sqfs`` for squashfs, ``zstd``/``gzip`` for the tar formats), entries read back from the temporary tar.

Normalisation (what the sandbox's overlay and threat model need; docs/cache.md "Images"):
- ``.wh.NAME`` -> a 0:0 character device NAME (an overlay whiteout); ``.wh..wh..opq`` in D -> the xattr
  ``user.overlay.opaque=y`` on D (the sandbox mounts overlay with ``userxattr``, so only the user. namespace
  counts); a whiteout and a folder of the same name in one layer -> an opaque folder.
- owners: uid/gid u -> store.owner + u (u < 65536; others become nobody), so image users keep their identity
  inside sandboxes, which id-map the layer ids ``100000 + u`` onto their own host ids (u inside); a store
  with another owner (rootless) gets every file as its own.
- setuid/setgid bits are dropped (no_new_privs makes them inert inside, and on a node's disk a setuid file
  owned by a mapped uid is an escalation path for host users); device files, FIFOs and sockets are dropped
  (the sandbox brings its own /dev); source xattrs other than ``user.*`` are dropped, and ``user.overlay.*``
  ones too (only the converter may speak to overlayfs).
- refused: ``..`` components, entries under a symlink of the same layer, hard links to a path that is not a
  regular file of this layer (into a lower layer, out of the layer, or through a symlink). A relative symlink
  that climbs above the root becomes the absolute target it resolves to (``..`` at / stays at / in the
  sandbox), which the node-side vetter accepts.
- duplicates: the last entry of a path wins, as in every tar extractor. Output is sorted (parents first,
  hard links last), so the same layer converts to the same bytes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import posixpath
import shutil
import stat
import subprocess
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..manifest import Manifest
from ..packing import MAPPED_ROOT_UID, PackResult, UnsafeArchiveError, fsync_path, sha256_file
from ..store import LayerStore, disk_full_hint

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "SCHILY.xattr.user.overlay.opaque"
ID_RANGE = 65536
NOBODY = 65534
DISK_FULL_BYTES = 4 << 20
"""A packer that fails with less free space than this on its output's filesystem ran out of disk."""
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


class LayerDigestError(ValueError):
    """A blob's bytes (or its uncompressed tar) do not match the digest the image names."""


@dataclass(frozen=True)
class LayerBlob:
    """One layer of an image, as its source gives it."""

    open: Callable[[], IO[bytes]]
    """Opens the (possibly compressed) bytes from the start."""
    digest: str
    """``sha256:<hex>`` of those bytes (the manifest's layer descriptor)."""
    diff_id: str
    """``sha256:<hex>`` of the uncompressed tar (the config's rootfs.diff_ids entry)."""
    size: int = 0
    """Bytes of the blob (what the I/O budget is held for); 0 when unknown."""
    media_type: str = ""
    """The descriptor's mediaType (informational: the compression is recognised from the bytes)."""


@dataclass
class _Plan:
    """What the normalised layer holds: the last header of each path, opaque folders and whiteouts."""

    entries: dict[str, tarfile.TarInfo] = field(default_factory=dict)
    opaque: set[str] = field(default_factory=set)
    whiteouts: set[str] = field(default_factory=set)
    dropped: dict[str, int] = field(default_factory=dict)
    setuid_cleared: int = 0


def layer_key(diff_id: str) -> str:
    """Store key of an image layer: ``oci-`` + the hex of its diff_id (the same tar, however compressed,
    is one layer: a docker-save tarball and a registry share it)."""
    algo, _, hexdigest = diff_id.partition(":")
    if algo != "sha256" or len(hexdigest) != 64 or not all(c in "0123456789abcdef" for c in hexdigest):
        raise LayerDigestError(f"layer diff_id: expected 'sha256:' + 64 hex digits; found {diff_id!r}.")
    return f"oci-{hexdigest}"


def convert_layer(store: LayerStore, blob: LayerBlob, *, image: str = "") -> Manifest:
    """The store's layer for ``blob``: reused when present, else converted and published atomically."""
    key = layer_key(blob.diff_id)
    with store.lock(key):
        have = store.get(key)
        if have is not None:
            return have
        raw = store.tmp_path(key, "tar")
        out = store.tmp_path(key, store.fmt)
        try:
            _decompress_verified(blob, raw)
            plan = _plan(raw, blob)
            packed = _write(raw, plan, out, store)
            meta = {
                "digest": blob.digest,
                "diff_id": blob.diff_id,
                "media_type": blob.media_type,
                "compressed_size": blob.size,
                "image": image,
                "dropped": plan.dropped,
                "setuid_cleared": plan.setuid_cleared,
                "whiteouts": len(plan.whiteouts),
                "opaque": len(plan.opaque),
            }
            return store.publish_packed(key, packed, store.fmt, kind="image-layer", meta=meta)
        except OSError as e:
            raise disk_full_hint(e, f"converting image layer {blob.digest}", store.root) from e
        finally:
            raw.unlink(missing_ok=True)
            out.unlink(missing_ok=True)


# ---- pass 1: decompress into tmp/, checking both digests ------------------------------------------------
def _decompress_verified(blob: LayerBlob, dest: Path) -> None:
    packed_hash, tar_hash = hashlib.sha256(), hashlib.sha256()
    with blob.open() as src, open(dest, "wb") as out:
        head = src.read(4)
        if head[:2] == _GZIP or head == _ZSTD:
            tool = ["gzip", "-dc"] if head[:2] == _GZIP else ["zstd", "-dcq"]
            proc = subprocess.Popen(tool, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            feeder = threading.Thread(target=_feed, args=(head, src, proc.stdin, packed_hash), daemon=True)
            feeder.start()
            done = False
            try:
                while chunk := proc.stdout.read(1 << 20):
                    tar_hash.update(chunk)
                    out.write(chunk)
                done = True
            finally:  # also on a full disk: no decompressor or feeder is left behind
                if not done:
                    proc.kill()
                feeder.join()
                err = proc.stderr.read().decode(errors="replace")
                proc.stdout.close()
            if proc.wait() != 0:
                raise LayerDigestError(
                    f"layer {blob.digest}: {tool[0]} cannot decompress it ({err.strip()}); "
                    f"the download is corrupt or truncated: pull the image again."
                )
        else:  # an uncompressed tar (docker save's layer.tar)
            chunk = head
            while chunk:
                packed_hash.update(chunk)
                tar_hash.update(chunk)
                out.write(chunk)
                chunk = src.read(1 << 20)
        out.flush()
    for what, want, got in (("blob", blob.digest, packed_hash), ("uncompressed tar (diff_id)", blob.diff_id, tar_hash)):
        if want != f"sha256:{got.hexdigest()}":
            raise LayerDigestError(
                f"layer {blob.digest}: the {what} hashes to sha256:{got.hexdigest()}, the "
                f"image says {want}; the download is corrupt: pull the image again."
            )


def _feed(head: bytes, src: IO[bytes], sink: IO[bytes], digest) -> None:
    try:
        chunk = head
        while chunk:
            digest.update(chunk)
            sink.write(chunk)
            chunk = src.read(1 << 20)
    except BrokenPipeError:
        pass  # the decompressor failed; its exit status says why
    finally:
        with contextlib.suppress(BrokenPipeError):
            sink.close()


# ---- pass 2: read the headers and decide what the layer holds ---------------------------------------------
def _norm(name: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"'..' in path {name!r}")
    return "/".join(parts)


def _plan(raw: Path, blob: LayerBlob) -> _Plan:
    plan = _Plan()
    try:
        with tarfile.open(raw, "r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError as e:
        raise UnsafeArchiveError(f"layer {blob.digest}: not a readable tar ({e})") from None
    try:
        for m in members:
            _add(plan, m)
        _check(plan)
    except UnsafeArchiveError as e:
        raise UnsafeArchiveError(f"refusing image layer {blob.digest}: {e}") from None
    return plan


def _add(plan: _Plan, m: tarfile.TarInfo) -> None:
    path = _norm(m.name)
    folder, base = posixpath.split(path)
    if base == OPAQUE:
        plan.opaque.add(folder)
        return
    if base.startswith(WHITEOUT + WHITEOUT):
        return  # other AUFS metadata (.wh..wh.plnk, ...): never part of the image's files
    if base.startswith(WHITEOUT):
        plan.whiteouts.add(posixpath.join(folder, base[len(WHITEOUT) :]))
        return
    if not path:
        return  # the layer's root entry: the packer gives the root the layer default
    if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
        kind = "device" if (m.ischr() or m.isblk()) else "fifo" if m.isfifo() else "other"
        plan.dropped[kind] = plan.dropped.get(kind, 0) + 1
        plan.entries.pop(path, None)
        return
    m.name = path
    plan.entries.pop(path, None)  # the last entry wins, and takes the place of the earlier one
    plan.entries[path] = m


def _check(plan: _Plan) -> None:
    """Links, paths under symlinks, whiteouts next to real entries."""
    symlinks = {p for p, m in plan.entries.items() if m.issym()}
    dirs = {p for p, m in plan.entries.items() if m.isdir()}
    for path in [*plan.entries, *plan.whiteouts, *plan.opaque]:
        parent = posixpath.dirname(path)
        while parent:
            if parent in symlinks:
                raise UnsafeArchiveError(f"{path!r} lies under the symlink {parent!r} of the same layer")
            if parent in plan.entries and parent not in dirs:
                raise UnsafeArchiveError(f"{path!r} lies under {parent!r}, which this layer makes a file")
            parent = posixpath.dirname(parent)
    for path, m in plan.entries.items():
        if m.issym() and not m.linkname.startswith("/"):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(path), m.linkname))
            if target == ".." or target.startswith("../"):
                m.linkname = "/" + _clamp(posixpath.dirname(path), m.linkname)
        elif m.islnk():
            target = _norm(m.linkname)
            other = plan.entries.get(target)
            if other is None or not other.isreg():
                raise UnsafeArchiveError(
                    f"hard link {path!r} -> {m.linkname!r}: the target is not a regular "
                    f"file of this layer (links into lower layers, out of the layer or "
                    f"through symlinks are refused)"
                )
            m.linkname = target
    for path in list(plan.whiteouts):
        if path in dirs:  # "delete the folder, then create it again": the same as an opaque folder
            plan.opaque.add(path)
            plan.whiteouts.discard(path)
        elif path in plan.entries:
            plan.whiteouts.discard(path)  # the entry itself already hides the lower file
    plan.opaque.discard("")  # an opaque root would hide the whole lower image; squashed images need none


def _clamp(folder: str, link: str) -> str:
    parts = folder.split("/") if folder else []
    for part in link.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


# ---- pass 3: write the normalised tar into the store's packer --------------------------------------------
def _owner(uid: int, base: int, span: int) -> int:
    return base + (uid if uid < span else NOBODY if span > NOBODY else 0)


def _write(raw: Path, plan: _Plan, dest: Path, store: LayerStore) -> PackResult:
    base = store.owner if store.owner is not None else MAPPED_ROOT_UID
    span = ID_RANGE if base == MAPPED_ROOT_UID else 1
    if store.fmt == "squashfs":
        cmd = [
            "tar2sqfs",
            "--quiet",
            "--no-skip",
            "--force",
            "-c",
            "zstd",
            "-X",
            "level=3",
            "-d",
            f"uid={base},gid={base},mode=0755",
            str(dest),
        ]
        sink = None
    else:
        cmd = ["zstd", "-T0", "-3", "-q", "-c"] if store.fmt == "tar.zst" else ["gzip", "-6", "-c"]
        sink = open(dest, "wb")  # noqa: SIM115 - closed below, after the packer exits
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=sink or subprocess.DEVNULL, stderr=subprocess.PIPE)
    files = size = 0
    try:
        with (
            tarfile.open(raw, "r:") as src,
            tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as out,
        ):
            for info, data in _output(plan, src, base, span):
                out.addfile(info, data)
                files += 1
                size += info.size if info.isreg() else 0
    except BrokenPipeError:
        pass  # the packer died (e.g. disk full): its exit status and stderr say why
    except BaseException:
        proc.kill()  # our side failed: the half-written output is removed by the caller
        raise
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
        code = proc.wait()
        if sink is not None:
            sink.close()
    if code != 0:  # keep ENOSPC recognisable: the store turns it into a "disk full" message
        # tar2sqfs reports a full disk as a bare "I/O error": the free space tells
        full = "No space left on device" in err or shutil.disk_usage(dest.parent).free < DISK_FULL_BYTES
        why = errno.ENOSPC if full else errno.EIO
        raise OSError(why, f"{cmd[0]} packing {dest.name} failed (exit {code}): {err.strip()[-2000:]}")
    fsync_path(dest)
    return PackResult(dest, sha256_file(dest), dest.stat().st_size, files, size)


def _output(plan: _Plan, src: tarfile.TarFile, base: int, span: int):
    """(header, data) pairs: folders before their contents, hard links last."""
    extra = {p: _synth_dir(p) for p in plan.opaque if p not in plan.entries}
    extra.update({p: _whiteout(p) for p in plan.whiteouts})
    everything = {**plan.entries, **extra}
    order = sorted(everything, key=lambda p: (everything[p].islnk(), p.split("/")))
    for path in order:
        m = everything[path]
        info = tarfile.TarInfo(path)
        # sparse and contiguous files are written out as plain regular files
        info.type = tarfile.REGTYPE if m.isreg() else m.type
        info.mode, info.mtime, info.linkname = m.mode, m.mtime, m.linkname
        info.devmajor, info.devminor = m.devmajor, m.devminor
        info.uid, info.gid = _owner(m.uid, base, span), _owner(m.gid, base, span)
        info.pax_headers = {
            k: v
            for k, v in m.pax_headers.items()
            if k.startswith("SCHILY.xattr.user.") and not k.startswith("SCHILY.xattr.user.overlay.")
        }
        if m.isreg():
            info.size = m.size
            if info.mode & (stat.S_ISUID | stat.S_ISGID):
                info.mode &= ~(stat.S_ISUID | stat.S_ISGID)
                plan.setuid_cleared += 1
        if path in plan.opaque:
            info.pax_headers[OPAQUE_XATTR] = "y"
        yield info, (src.extractfile(m) if m.isreg() and path in plan.entries else None)


def _synth_dir(path: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


def _whiteout(path: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type, info.mode, info.devmajor, info.devminor = tarfile.CHRTYPE, 0, 0, 0
    return info
