"""The layer store a ``swebox cache`` command names with ``--store``, checked before the command touches it.

Shared by cache_cli.py (layers) and cache_images_cli.py (images), which both open stores; kept apart from both so
that neither reaches into the other's private helpers.
"""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

from swebox.envs.cache.store import LayerStore


def open_store(args: argparse.Namespace, fmt: str | None = None, *, create: bool = False) -> LayerStore:
    """The store of ``--store``; only commands that write layers (build, import) may create a new one."""
    from swebox.envs.cache.store import available_formats

    if not create:
        existing_store(args.store)
    else:
        writable_store(args.store)
    return LayerStore(args.store, fmt=fmt or available_formats()[0])


def writable_store(path: str) -> None:
    """A command that writes layers into a store another user owns would fail half-way with EACCES."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the store is created inside its nearest existing parent
    subs = [folder / s for s in ("", "blobs", "manifests", "tmp", "locks") if (folder / s).exists()]
    denied = [p for p in subs if not os.access(p, os.W_OK | os.X_OK)]
    if denied:
        raise PermissionError(
            errno.EACCES,
            f"this user (uid {os.geteuid()}) cannot write the layer store: "
            f"expected a folder of its own; found {denied[0]} owned by uid "
            f"{denied[0].stat().st_uid}. Pass `--store` a folder this user owns (a rootless "
            f"store: its layers are packed as this user's files), or run as that folder's "
            f"owner",
            path,
        )


def existing_store(path: str) -> None:
    """Reading commands on a mistyped store must say so, not create an empty store and list nothing."""
    if not (Path(path) / "manifests").is_dir():
        raise FileNotFoundError(
            errno.ENOENT,
            "no layer store here (expected a folder written by `swebox cache "
            "build` or `swebox tasks synth`, with manifests/ inside); pass `swebox cache "
            "--store PATH ls` (or build, verify, ...) or set $SWEBOX_LAYER_STORE",
            path,
        )
