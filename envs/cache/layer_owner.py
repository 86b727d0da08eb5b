"""Whose files a stored layer holds: a rootless sandbox maps only its user's uid, so a squashfs layer packed for
another uid (``meta['owner']``, store.py's module docstring) would show every file as read-only ``nobody``;
the node cache refuses such a layer before it is materialised, saying how to get one of this user's own.
"""

from __future__ import annotations

import os
from pathlib import Path

from .manifest import Manifest


class LayerOwnerError(PermissionError):
    """A squashfs layer packed for another uid than the one this rootless process maps into its sandboxes."""


def check_owner(manifest: Manifest, store_root: Path) -> None:
    """Refuse a layer whose files a rootless sandbox would see as nobody's (``store`` module docstring)."""
    owner, uid = manifest.meta.get("owner"), os.geteuid()
    if manifest.format == "squashfs" and owner is not None and uid != 0 and owner != uid:
        raise LayerOwnerError(
            f"layer {manifest.key} in {store_root}: expected files owned by uid {uid} (a rootless sandbox maps "
            f"only its user's uid); found a layer packed for uid {owner}, whose files the sandbox would show as "
            f"read-only 'nobody'. Pull or build it again as this user into a store of your own (`swebox cache "
            f"--store DIR pull IMAGE` or `build`), or run as root."
        )
