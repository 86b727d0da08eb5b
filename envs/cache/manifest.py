"""Manifest: the record of one complete layer in a store (``manifests/<key>.json``), and the builder version
each records.

A store (store.py) writes a manifest last, so its presence means the layer's blob is complete; everything that
reads layers (the node cache, the builders, the image converter) reads them through this record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from swebox.envs.sandbox.strict import strict_from_dict

from .packing import check_format

BUILDER_VERSION = "2"
"""Bumped when the builder's output layout changes, so old layers are recognisable (it is recorded in each
manifest, not part of the key: an old layer stays valid). 1: no bytecode anywhere; 2: the venv's third-party
code byte-compiled (checked-hash pycs, never the project's)."""


@dataclass(frozen=True)
class Manifest:
    """One complete layer in a store."""

    key: str
    """The layer's key (``env-...`` or ``task-...``)."""
    format: str
    """One of FORMATS."""
    sha256: str
    """Hex digest of the packed file; also its name in blobs/."""
    size: int
    """Bytes of the packed file."""
    files: int
    """Entries in the packed tree."""
    created: float
    """Unix time of publication."""
    tree_bytes: int = 0
    """Bytes of regular files in the unpacked tree (what a tar format occupies once unpacked)."""
    builder_version: str = BUILDER_VERSION
    """BUILDER_VERSION of the code that built it."""
    build_log: str = ""
    """Path of the build log relative to the store root ('' when none)."""
    kind: str = "layer"
    """'env', 'task' or 'layer'."""
    parent: str = ""
    """Key of the layer this one sits on (a task layer's env layer), '' for none."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Free-form facts about the layer (e.g. the EnvSpec dict, pip freeze size)."""

    def __post_init__(self) -> None:
        check_format(self.format)

    @property
    def blob(self) -> str:
        """Path of the packed file relative to the store root."""
        return f"blobs/{self.sha256[:2]}/{self.sha256}.{self.format}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        return strict_from_dict(cls, d, what="layer manifest", fix=STALE_RECORD)


STALE_RECORD = (
    "it was written by another swebox version; make it again (`swebox cache build`, or `swebox cache "
    "pull` for an image)"
)
