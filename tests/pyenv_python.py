"""A copy of the machine's pyenv build of an older Python that the sandbox's unprivileged root can run.

pyenv's builds sit under root's 0700 home and their ``RUNPATH`` names that folder, so the sandbox cannot run
them (swebox finds and refuses them). Tests that need Python 3.9 (the recipes of most SWE-bench Verified rows)
copy the build once to a folder every user can read, outside /tmp (every sandbox has its own /tmp), with its
RUNPATH rewritten to ``$ORIGIN/../lib`` and its C headers (extensions compile against them), and name it in
``$SWEBOX_PYTHONS``, where swebox's interpreter search looks. The standard library's own test suite is left
out (not needed, a third of the size).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
COPIES = Path("/var/tmp/swebox-test-pythons")


def _relocate(binary: Path, old: str) -> None:
    """Rewrite the RUNPATH string ``old`` inside ``binary`` to ``$ORIGIN/../lib`` in place (a shorter string,
    NUL-padded: the dynamic string table keeps its size and offsets)."""
    data = binary.read_bytes()
    needle = old.encode() + b"\0"
    assert data.count(needle) == 1, f"{binary}: expected its RUNPATH {old!r} once"
    new = b"$ORIGIN/../lib"
    binary.write_bytes(data.replace(needle, new + b"\0" * (len(needle) - len(new))))


def readable_python(minor: str) -> Path:
    """The prefix of a runnable copy of pyenv's Python ``minor`` ('3.9'); skips the test when pyenv has none."""
    builds = sorted(PYENV.glob(f"{minor}.*"), key=lambda p: tuple(int(x) for x in p.name.split(".")))
    if not builds:
        pytest.skip(f"needs pyenv's Python {minor} (in {PYENV})")
    build = builds[-1]
    target = COPIES / build.name
    if (target / "bin" / f"python{minor}").exists():
        _add_headers(build, target)
        return target
    COPIES.mkdir(parents=True, exist_ok=True)
    os.chmod(COPIES, 0o755)
    staging = Path(tempfile.mkdtemp(prefix=f".{build.name}-", dir=COPIES))
    (staging / "bin").mkdir()
    shutil.copy2(build / "bin" / f"python{minor}", staging / "bin" / f"python{minor}")
    _relocate(staging / "bin" / f"python{minor}", str(build / "lib"))
    (staging / "bin" / "python3").symlink_to(f"python{minor}")
    shutil.copytree(
        build / "lib",
        staging / "lib",
        symlinks=True,
        ignore=shutil.ignore_patterns("test", "__pycache__", "idle_test", "tkinter", "idlelib"),
    )
    shutil.copytree(build / "include", staging / "include", symlinks=True)
    subprocess.run(["chmod", "-R", "a+rX", str(staging)], check=True)
    try:
        staging.rename(target)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _add_headers(build: Path, target: Path) -> None:
    """Give a copy made without them the build's C headers (``include/pythonX.Y``): recipes that compile
    extensions (astropy's ``pip install -e .``) include ``Python.h`` from the interpreter's prefix."""
    if (target / "include").exists() or not (build / "include").is_dir():
        return
    staging = Path(tempfile.mkdtemp(prefix=".include-", dir=target))
    shutil.copytree(build / "include", staging / "include", symlinks=True)
    subprocess.run(["chmod", "-R", "a+rX", str(staging)], check=True)
    try:
        (staging / "include").rename(target / "include")
    except OSError:  # another process added them first
        pass
    shutil.rmtree(staging, ignore_errors=True)
