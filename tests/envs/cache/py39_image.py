"""A runnable test image with its own interpreter, in SWE-bench's layout.

Layer 1: a Debian bullseye root filesystem made by ``mmdebstrap`` (Python 3.9, git), with a venv made by
bullseye's own Python at /opt/venv/testbed (pytest installed from PyPI at build time) and a
``/root/.bashrc`` that activates it, as SWE-bench images do with their conda env. Layer 2: a small project at
/testbed (a git repository at its base commit) with a bug its tests catch, installed in development mode
(a .pth in the venv, as ``pip install -e .`` leaves).

The root filesystem takes a couple of minutes to fetch from Debian's archive, so it is cached between test
runs in ``$SWEBOX_TEST_IMAGE_CACHE`` (default /var/tmp/swebox-test-images), keyed by everything that makes it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from .oci_fixture import write_layout

SUITE = "bullseye"
PACKAGES = "python3,python3-venv,git,ca-certificates"
# pytest from PyPI, as SWE-bench's env scripts install it: the grader's runner needs pluggy >= 1.0, which
# bullseye's own python3-pytest (6.0, pluggy 0.13) lacks
# bullseye's own python3-pytest (6.0, pluggy 0.13) lacks. The wheels are fetched by the host's pip (which
# knows this machine's index and certificates) and installed offline in the chroot.
PYTEST = "pytest==7.4.4"
PY39_ONLY = ("exceptiongroup", "tomli")
"""pytest's dependencies for Python < 3.11, which pip download evaluates against the host's 3.11."""
HOOKS = (
    'chroot "$1" python3 -m venv /opt/venv/testbed',
    'cp -r "$WHEELS" "$1/tmp/wheels"',
    f'chroot "$1" /opt/venv/testbed/bin/pip install -q --no-index --find-links /tmp/wheels "{PYTEST}"',
    'rm -rf "$1/tmp/wheels"',
    'echo ". /opt/venv/testbed/bin/activate" > "$1/root/.bashrc"',
)
VENV_PYTHON = "/opt/venv/testbed/bin/python"
SITE_PACKAGES = "opt/venv/testbed/lib/python3.9/site-packages"

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = (
    "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_mul():\n    assert mul(2, 3) == 6\n"
)
GOLD = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n"
    "-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n"
)


def cache_dir() -> Path:
    return Path(os.environ.get("SWEBOX_TEST_IMAGE_CACHE") or "/var/tmp/swebox-test-images")


def rootfs_tar() -> Path:
    """The bullseye rootfs tar, built once (under a lock, so parallel runs build it once too)."""
    key = hashlib.sha256("\n".join([SUITE, PACKAGES, PYTEST, *PY39_ONLY, *HOOKS]).encode()).hexdigest()[:16]
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{SUITE}-py39-{key}.tar"
    with open(folder / f"{target.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            tmp = target.with_suffix(".tmp.tar")
            wheels = folder / f"wheels-{key}"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--only-binary=:all:",
                    "--python-version",
                    "3.9",
                    "-d",
                    str(wheels),
                    PYTEST,
                    *PY39_ONLY,
                ],
                check=True,
                timeout=600,
            )
            hooks = [f"--customize-hook={h}" for h in HOOKS]
            proc = subprocess.run(
                ["mmdebstrap", "--quiet", "--variant=apt", f"--include={PACKAGES}", *hooks, SUITE, str(tmp)],
                capture_output=True,
                text=True,
                timeout=1200,
                env={**os.environ, "WHEELS": str(wheels)},
            )
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise RuntimeError(f"mmdebstrap failed: {proc.stderr[-3000:]}")
            os.rename(tmp, target)
    return target


def project_tar(work: Path) -> bytes:
    """/testbed: the project at its base commit, as a git repository (made with the host's git)."""
    repo = work / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": os.environ["PATH"],
        "HOME": str(work),
    }
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "base"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    out = work / "project.tar"

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    # installed in development mode, as SWE-bench's images do (`pip install -e .` leaves a .pth to the source)
    pth = work / "calc.pth"
    pth.write_text("/testbed\n")
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(repo, "testbed", filter=as_root)
        tar.add(pth, f"{SITE_PACKAGES}/calc.pth", filter=as_root)
    return out.read_bytes()


def py39_layout(work: Path) -> Path:
    """The two-layer image as an OCI layout at ``work/layout`` (tag ``latest``), zstd-compressed layers."""
    layers = [rootfs_tar().read_bytes(), project_tar(work)]
    return write_layout(
        work / "layout",
        layers,
        compression="zstd",
        config={"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "WorkingDir": "/testbed"},
    )
