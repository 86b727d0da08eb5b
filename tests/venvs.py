"""Virtual environments of other Python versions for tests that need packages the 3.11 suite cannot hold.

Some packages swebox is tested against require Python >= 3.12 (harbor 0.25, skyrl 0.4), so their tests drive
a venv of their own, made once per content key (interpreter, requirements, checkout) under
``$SWEBOX_TEST_VENV_CACHE`` (default /var/tmp/swebox-test-venvs), with a lock, so parallel runs make it once
and a changed requirement list makes a new one. swebox itself goes in editable and without dependencies
(its sandbox, cache and tasks need only the standard library; each venv names what else it needs).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def python(minor: str) -> str:
    """The interpreter for ``minor`` ('3.12'): $SWEBOX_PY312-style override, pyenv's build, or pythonX.Y on
    PATH; '' when there is none."""
    override = os.environ.get("SWEBOX_PY" + minor.replace(".", ""), "")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    builds = sorted(pyenv.glob(f"{minor}.*"), key=lambda p: tuple(int(x) for x in p.name.split(".") if x.isdigit()))
    for candidate in (override, *(str(b / "bin" / "python") for b in reversed(builds)), f"python{minor}"):
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    return ""


def venv_path(name: str, interpreter: str, requirements: list[str]) -> Path:
    """Where :func:`cached_venv` keeps that venv (whole when ``.complete`` is in it)."""
    key = hashlib.sha256("\n".join([interpreter, *requirements, str(REPO)]).encode()).hexdigest()[:12]
    return Path(os.environ.get("SWEBOX_TEST_VENV_CACHE") or "/var/tmp/swebox-test-venvs") / f"{name}-{key}"


def cached_venv(name: str, interpreter: str, requirements: list[str], *, pip_timeout: float = 1800) -> Path:
    """The venv ``<name>-<key>`` with ``requirements`` and this checkout (made on first use; pip needs the
    package index the first time)."""
    venv = venv_path(name, interpreter, requirements)
    root = venv.parent
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # sandboxes bind venvs from here (harness episodes): their unprivileged root traverses it
    with open(root / f"{venv.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, timeout=300)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, *requirements], check=True, timeout=pip_timeout)
            subprocess.run([*pip, "--no-deps", "-e", str(REPO)], check=True, timeout=600)
            (venv / ".complete").touch()
    return venv


def run_in(
    venv: Path, *argv: str, timeout: float = 600, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """A command of the venv (its bin/ first on PATH), output captured; litellm kept off the network."""
    environ = {
        **os.environ,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "VIRTUAL_ENV": str(venv),
        **(env or {}),
    }
    environ.pop("PYTHONPATH", None)
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=environ, cwd=cwd)
