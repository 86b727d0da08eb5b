"""Real Go and Rust toolchains and project sources for tests, from Debian's packages (``apt-get download``).

Each set of packages is unpacked once with ``dpkg-deb -x`` into ``~/.cache/swebox/debian/<name>`` (a tree
rooted like ``/``: ``usr/lib/go-1.19``, ``usr/bin/cargo``, ``usr/share/gocode``...), which a test binds
read-only into its sandboxes. Tests skip when ``apt-get`` cannot fetch them (no Debian archive reachable).

Stand-in until the toolchain layers (issue 37, item 1) are on this branch: the commands below are the ones a
task's ``eval_commands`` would get from a toolchain's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CACHE = Path(os.path.expanduser("~/.cache/swebox/debian"))
GO = ("golang-1.19-go", "golang-1.19-src")
"""Debian 12's Go 1.19 (the compiler and its standard library's sources, which go build reads)."""
RUST = ("rustc", "cargo", "libstd-rust-1.63", "libstd-rust-dev", "libgit2-1.5", "libhttp-parser2.9",
        "libmbedtls14", "libmbedx509-1", "libmbedcrypto7")
"""Debian 12's rustc 1.63 and cargo, with the libraries cargo links that the host may lack."""


def unpacked(name: str, packages: tuple[str, ...]) -> Path:
    """The folder ``packages`` are unpacked into (downloaded on first use); skips the test without apt-get."""
    root = CACHE / name
    if (root / ".complete").is_file():
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("apt-get/dpkg-deb are needed to fetch Debian's toolchain packages")
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # apt's _apt user writes the downloads
        got = subprocess.run(["apt-get", "download", "-q", *packages], cwd=tmp, capture_output=True, text=True,
                             timeout=600)
        if got.returncode != 0:
            pytest.skip(f"apt-get download {' '.join(packages)} failed: {got.stderr.strip()[-300:]}")
        root.mkdir(parents=True, exist_ok=True)
        for deb in sorted(Path(tmp).glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=600)
    (root / ".complete").write_text("\n".join(packages) + "\n")
    os.chmod(CACHE, 0o755)
    return root


def go_env(root: Path) -> tuple[str, ...]:
    """Shell lines that put Debian's Go (unpacked at ``root``) first on PATH, offline, caches in /tmp."""
    goroot = root / "usr/lib/go-1.19"
    return (f"export GOROOT={goroot} PATH={goroot}/bin:$PATH GOPATH=/tmp/gopath GOCACHE=/tmp/gocache "
            "GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0",)


def rust_env(root: Path) -> tuple[str, ...]:
    """Shell lines that put Debian's rustc and cargo (unpacked at ``root``) first on PATH, offline."""
    return (f"export PATH={root}/usr/bin:$PATH LD_LIBRARY_PATH={root}/usr/lib/x86_64-linux-gnu "
            "CARGO_HOME=/tmp/cargo-home CARGO_TARGET_DIR=/tmp/cargo-target CARGO_NET_OFFLINE=true",)
