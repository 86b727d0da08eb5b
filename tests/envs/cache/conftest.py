"""Shared fixtures: small layer trees with the overlay metadata that packing must keep."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs host root (mknod whiteouts, loop mounts, tmpfs)")
needs_squashfs = pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="mksquashfs is not installed")


def make_layer_tree(root: Path, payload: bytes = b"") -> Path:
    """A layer folder like a task layer: files, a venv-style absolute symlink, a relative symlink, a
    hard link, an overlay whiteout (char device 0:0) and an opaque directory (user.overlay.opaque)."""
    (root / "testbed" / "pkg").mkdir(parents=True)
    (root / "testbed" / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "testbed" / "data.bin").write_bytes(payload)
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").symlink_to("/opt/python/bin/python3.11")
    (root / "testbed" / "link.py").symlink_to("pkg/mod.py")
    os.link(root / "testbed" / "pkg" / "mod.py", root / "testbed" / "hard.py")
    (root / "testbed" / "opaque").mkdir()
    (root / "testbed" / "opaque" / "kept.txt").write_text("kept")
    os.setxattr(root / "testbed" / "opaque", "user.overlay.opaque", b"y")
    if IS_ROOT:
        os.mknod(root / "testbed" / "deleted.py", 0o600 | 0o020000, os.makedev(0, 0))
    return root


@pytest.fixture
def layer_tree(tmp_path: Path) -> Path:
    return make_layer_tree(tmp_path / "layer")


@pytest.fixture(scope="session")
def built_env(tmp_path_factory):
    """The fixture project built once into a squashfs store (network: pytest and setuptools from PyPI)."""
    if not IS_ROOT or shutil.which("mksquashfs") is None:
        pytest.skip("building env layers here needs root (loop mounts) and mksquashfs")
    from swebox.envs.cache import EnvSpec, LayerCache, LayerCacheConfig, LayerStore
    from swebox.envs.cache.builder import build_env

    from .fixture_project import write_repo

    base = tmp_path_factory.mktemp("built")
    repo, head = write_repo(base / "calc")
    store = LayerStore(base / "store", fmt="squashfs")
    spec = EnvSpec(source=str(repo), commit=head)
    manifest = build_env(store, spec)
    cache = LayerCache(store, LayerCacheConfig(root=str(base / "node")))
    yield store, spec, manifest, cache
    cache.close()
