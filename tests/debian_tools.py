"""Real project sources from Debian's packages for tests (``apt-get download``; an upstream tarball from
Debian's pool, :func:`orig_source`), and the test toolchain store.

Each set of packages is unpacked once with ``dpkg-deb -x`` into ``~/.cache/swebox/debian/<name>`` (a tree
rooted like ``/``: ``usr/share/gocode``, ``usr/share/cargo/registry``, ``usr/src/googletest``...). Tests skip
when ``apt-get`` cannot fetch them (no Debian archive reachable). The toolchains that build them are toolchain
layers (swebox.envs.cache.toolchains) in one store every test shares (:func:`toolchain_store`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import pytest

CACHE = Path(os.path.expanduser("~/.cache/swebox/debian"))


def unpacked(name: str, packages: tuple[str, ...]) -> Path:
    """The folder ``packages`` are unpacked into (downloaded on first use); skips the test without apt-get."""
    root = CACHE / name
    if (root / ".complete").is_file():
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get/dpkg-deb are needed to fetch Debian's toolchain packages")
    CACHE.mkdir(parents=True, exist_ok=True)
    os.chmod(CACHE, 0o755)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir=CACHE) as part:
        os.chmod(tmp, 0o777)  # apt's _apt user writes the downloads
        got = subprocess.run(
            ["apt-get", "download", "-q", *packages], cwd=tmp, capture_output=True, text=True, timeout=600
        )
        if got.returncode != 0:
            pytest.skip(f"apt-get download {' '.join(packages)} failed: {got.stderr.strip()[-300:]}")
        tree = Path(part) / "tree"
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True, timeout=600)
        (tree / ".complete").write_text("\n".join(packages) + "\n")
        tree.chmod(0o755)
        try:  # whole or absent: another test process may be unpacking the same packages
            tree.rename(root)
        except OSError:
            if not (root / ".complete").is_file():
                raise
    return root


POOL = os.environ.get("SWEBOX_TEST_DEBIAN_POOL") or "http://deb.debian.org/debian/pool/main"
"""Debian's package pool (``SWEBOX_TEST_DEBIAN_POOL`` for a mirror): where a source package's files are."""


def orig_source(name: str, pool_path: str, sha256: str) -> Path:
    """The upstream tarball ``pool_path`` (``r/redis/redis_7.0.15.orig.tar.gz``) of a Debian source package,
    checked against ``sha256`` and unpacked once into ``~/.cache/swebox/debian/<name>`` (whole or absent);
    returns its single top folder. Skips the test when the pool cannot be reached (no deb-src lines are
    needed: the file is fetched by its pool path, as ``apt-get source`` would)."""
    root = CACHE / name
    if not (root / ".complete").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        os.chmod(CACHE, 0o755)
        with tempfile.TemporaryDirectory(dir=CACHE) as part:
            tarball = Path(part) / "orig.tar"
            try:
                with urllib.request.urlopen(f"{POOL}/{pool_path}", timeout=120) as got:
                    tarball.write_bytes(got.read())
            except OSError as e:
                pytest.skip(f"Debian's pool has no {pool_path} reachable from here: {e}")
            digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
            assert digest == sha256, f"{pool_path}: expected sha256 {sha256}, found {digest}"
            tree = Path(part) / "tree"
            with tarfile.open(tarball) as tar:
                tar.extractall(tree, filter="tar")
            (tree / ".complete").write_text(pool_path + "\n")
            tree.chmod(0o755)
            try:  # another test process may be unpacking the same tarball
                tree.rename(root)
            except OSError:
                if not (root / ".complete").is_file():
                    raise
    (top,) = [p for p in root.iterdir() if p.is_dir()]
    return top


def relocated(name: str, packages: tuple[str, ...], links: dict[str, str]) -> Path:
    """``packages`` unpacked as by :func:`unpacked`, their scripts made to run from where they lie: every
    ``/usr/bin/X`` and ``/usr/share/X`` a text file names, for an X the packages ship, is rewritten to that
    path below the tree (Debian's autotools are Perl and shell scripts naming their data folders); ``links``
    (path in the tree -> target) are the links Debian's maintainer scripts would make (``update-alternatives``).
    The tree is bound read-only into sandboxes at the same path: a test-only tool set, not a toolchain layer."""
    root = CACHE / name
    if (root / ".complete").is_file():
        return root
    tree = unpacked(f"{name}.debs", packages)
    with tempfile.TemporaryDirectory(dir=CACHE) as part:
        work = Path(part) / "tree"
        shutil.copytree(tree, work, symlinks=True)
        shipped = [f"{d}/{p.name}" for d in ("bin", "share") for p in (work / "usr" / d).iterdir()]
        names = "|".join(re.escape(n) for n in sorted(shipped, key=len, reverse=True))
        path = re.compile(rf"(?<![\w/.-])/usr/({names})(?![\w.-])")
        for file in work.rglob("*"):
            if not file.is_file() or file.is_symlink():
                continue
            data = file.read_bytes()
            if data.startswith(b"\x7fELF") or b"\0" in data[:4096]:
                continue
            text = data.decode("utf-8", "surrogateescape")
            new = path.sub(lambda m: f"{root}/usr/{m[1]}", text)
            if new != text:
                file.write_bytes(new.encode("utf-8", "surrogateescape"))
        for link, target in links.items():
            (work / link).symlink_to(target)
        (work / ".complete").write_text("\n".join(packages) + "\n")
        try:
            work.rename(root)
        except OSError:
            if not (root / ".complete").is_file():
                raise
    return root


def toolchain_store() -> Path:
    """The toolchain layers' store the tests share ($SWEBOX_TEST_TOOLCHAIN_STORE, default
    /var/tmp/swebox-test-toolchains): content-addressed, so one build serves every test and every checkout."""
    return Path(os.environ.get("SWEBOX_TEST_TOOLCHAIN_STORE") or "/var/tmp/swebox-test-toolchains")


def row_store(folder: Path, toolchains: tuple[str, ...]) -> Path:
    """A layer store of one test's own at ``folder``, holding the toolchain layers ``toolchains`` copied from the
    shared store (built there once). The rows' env and task layers go here, not into the shared store: their
    mirrors' commits are made afresh each run, so their keys are new every time and would pile up there."""
    from swebox.envs.cache import LayerStore, copy_layers
    from swebox.envs.cache.toolchains import build_toolchain

    shared = LayerStore(toolchain_store())
    copy_layers(shared, LayerStore(folder), [build_toolchain(shared, name).key for name in toolchains])
    return folder
