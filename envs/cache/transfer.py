"""Copying layers from one store to another (export and import): blob, build log and manifest, each verified.

The target store's own publication rules hold (store.py): the blob is checked against its manifest's sha256
before it is renamed into place, and the manifest is written last, so a crash leaves no half-copied layer.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable

from .manifest import Manifest
from .packing import fsync_path, sha256_file
from .store import LayerCorruptError, LayerStore, disk_full_hint, write_atomic


def copy_layers(
    src: LayerStore,
    dst: LayerStore,
    keys: Iterable[str] | None = None,
    on_layer: Callable[[Manifest], None] | None = None,
) -> list[Manifest]:
    """Copy layers (blob, log, manifest) from ``src`` to ``dst`` with verification: export and import."""
    copied = []
    for m in src.ls() if keys is None else [src.require(k) for k in keys]:
        with dst.lock(m.key):
            have = dst.get(m.key)
            if have is None or have.sha256 != m.sha256:
                _copy_one(src, dst, m)
                copied.append(m)
        if on_layer:
            on_layer(m)
    return copied


def _copy_one(src: LayerStore, dst: LayerStore, m: Manifest) -> None:
    tmp = dst.root / "tmp" / f"{m.key}.{os.getpid()}.import.{m.format}"
    try:
        shutil.copyfile(src.blob_path(m), tmp)
        fsync_path(tmp)
        if sha256_file(tmp) != m.sha256:
            raise LayerCorruptError(
                f"{src.blob_path(m)} does not match its manifest (sha256); not copied. "
                f"Run `swebox cache verify` on {src.root} and rebuild the layer."
            )
        blob = dst.blob_path(m)
        blob.parent.mkdir(exist_ok=True)
        os.rename(tmp, blob)
        fsync_path(blob.parent)
        if m.build_log and (src.root / m.build_log).exists():
            write_atomic(dst.root / m.build_log, (src.root / m.build_log).read_bytes())
        dst._write_manifest(m)
    except OSError as e:
        raise disk_full_hint(e, f"copying layer {m.key}", dst.root) from e
    finally:
        tmp.unlink(missing_ok=True)
