"""Images in a LayerStore: ``images/<name>.json`` records naming their layers (base first) and config.

An image's layers are ordinary store layers keyed by digest (``oci-<diff_id hex>``), so images that share base
layers share their bytes, and ``gc`` keeps every layer a recorded image names. The record is written last
(atomically), after every layer is published: an interrupted import leaves complete layers, never a record
whose layers are missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from swebox.envs.sandbox.strict import strict_from_dict

from ..budget import IOBudget
from ..manifest import STALE_RECORD
from ..store import LayerStore, write_atomic
from .convert import convert_layer
from .sources import ImageSource

RUNTIME_VERSION = "1"
"""Bumped when the runtime layer's start script changes."""
START_SCRIPT = "/.swebox/image-start.sh"
"""Where the runtime layer puts the shell start; the sandbox's bash reads it through BASH_ENV."""
CONFIG_KEYS = ("Env", "WorkingDir", "User", "Entrypoint", "Cmd")


@dataclass
class ImageRecord:
    """One image in a store."""

    ref: str
    """The name it was pulled or imported as (``registry/repo:tag``, ``oci:DIR:TAG``, ...)."""
    digest: str
    """``sha256:`` digest of its manifest (for a docker-save tarball: of its config)."""
    platform: str
    """``os/arch[/variant]`` of the image."""
    layers: list[str]
    """Store keys of its layers, base first."""
    config: dict[str, Any]
    """Env, WorkingDir, User, Entrypoint and Cmd from the image config (absent keys omitted)."""
    runtime_layer: str
    """Store key of the small layer holding the shell start (``START_SCRIPT``)."""
    source: str = ""
    """'registry', 'oci-layout' or 'docker-archive'."""
    compressed_bytes: int = 0
    """Sum of the image's layer blobs as its source gave them."""
    created: float = field(default_factory=time.time)
    """When it was recorded."""

    def stack(self) -> list[str]:
        """Every layer key a sandbox of this image needs, lowest first."""
        return [*self.layers, self.runtime_layer]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageRecord:
        return strict_from_dict(cls, d, what="image record", fix=STALE_RECORD)


def record_path(store: LayerStore, ref: str) -> Path:
    return store.root / "images" / f"{quote(ref, safe='')}.json"


def get_image(store: LayerStore, ref: str) -> ImageRecord | None:
    try:
        return ImageRecord.from_dict(json.loads(record_path(store, ref).read_text()))
    except FileNotFoundError:
        return None


def require_image(store: LayerStore, ref: str) -> ImageRecord:
    record = get_image(store, ref)
    if record is None:
        raise KeyError(
            f"image {ref!r} is not in the store {store.root}; run `swebox cache pull {ref}` "
            f"(images there: {', '.join(r.ref for r in list_images(store)) or 'none'})."
        )
    return record


def list_images(store: LayerStore) -> list[ImageRecord]:
    records = []
    for path in sorted((store.root / "images").glob("*.json")):
        with contextlib.suppress(FileNotFoundError):
            records.append(ImageRecord.from_dict(json.loads(path.read_text())))
    return records


def remove_image(store: LayerStore, ref: str) -> bool:
    """Forget an image; its layers stay until ``gc`` finds no other image that needs them."""
    try:
        record_path(store, ref).unlink()
        return True
    except FileNotFoundError:
        return False


def import_image(
    store: LayerStore, source: ImageSource, ref: str, platform: str, budget: IOBudget | None = None
) -> ImageRecord:
    """Convert every layer of ``source`` (those already stored are reused), then record the image."""
    keys = []
    budget = budget or IOBudget()
    with store.images_lock():  # gc waits: the layers published so far have no record to protect them yet
        for blob in source.layers:
            with budget.hold(blob.size):
                keys.append(convert_layer(store, blob, image=ref).key)
        config = {k: v for k, v in (source.config.get("config") or {}).items() if k in CONFIG_KEYS and v}
        record = ImageRecord(
            ref=ref,
            digest=source.digest,
            platform=platform,
            layers=keys,
            config=config,
            runtime_layer=runtime_layer(store),
            source=source.kind,
            compressed_bytes=sum(b.size for b in source.layers),
        )
        (store.root / "images").mkdir(exist_ok=True)
        write_atomic(record_path(store, ref), json.dumps(asdict(record), indent=1, sort_keys=True).encode())
    return record


def start_script() -> str:
    """The image's shell start: sourced once by each new shell (BASH_ENV), then out of the way."""
    return (
        f"# swebox {RUNTIME_VERSION}: the image's shell start, read by the sandbox's bash through BASH_ENV\n"
        "unset BASH_ENV  # once: scripts the agent runs must not source it again\n"
        "# images such as SWE-bench's activate their conda env here\n"
        'if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc" >/dev/null 2>&1; fi\n'
    )


def runtime_layer(store: LayerStore) -> str:
    """The (tiny) layer holding the start script, stored once per distinct script."""
    script = start_script()
    key = "imgrt-" + hashlib.sha256(script.encode()).hexdigest()[:20]
    with store.lock(key):
        if store.get(key) is None:
            with tempfile.TemporaryDirectory(prefix="swebox-imgrt-") as tmp:
                os.chmod(tmp, 0o755)
                folder = Path(tmp, ".swebox")
                folder.mkdir(mode=0o755)
                (folder / "image-start.sh").write_text(script)
                store.publish(key, tmp, kind="image-runtime", meta={"script": script})
    return key
