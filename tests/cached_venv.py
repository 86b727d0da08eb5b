"""Virtual environments the tests need beside the suite's own (another Python, a program with heavy
dependencies), made once per content key under ``$SWEBOX_TEST_VENV_CACHE`` (default /var/tmp/swebox-test-venvs)
with a lock, so parallel runs make each once and a half-made one is never used (``.complete`` marks it whole).
pip needs the package index the first time."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path


def cached_venv(name: str, python: str, steps: list[list[str]]) -> Path:
    """The venv ``name-KEY`` of ``python``, after each of ``steps`` (pip arguments, e.g. ``["install", "x==1"]``)
    ran in it; KEY hashes the interpreter and the steps."""
    key = hashlib.sha256("\n".join([python, *(" ".join(step) for step in steps)]).encode()).hexdigest()[:12]
    root = Path(os.environ.get("SWEBOX_TEST_VENV_CACHE") or "/var/tmp/swebox-test-venvs")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # sandboxes bind venvs from here: their unprivileged root must traverse it
    venv = root / f"{name}-{key}"
    with open(root / f"{venv.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
            for step in steps:
                subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "-q", *step], check=True, timeout=1200)
            subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
            (venv / ".complete").touch()
    return venv
