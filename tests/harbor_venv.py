"""A Python 3.12 venv with the real ``harbor`` package and this checkout of swebox (editable, no torch extras).

harbor 0.25 requires Python >= 3.12 while the suite runs on 3.11, so its tests drive a venv of their own,
made once per (interpreter, harbor version, checkout) under ``$SWEBOX_TEST_VENV_CACHE`` (default
/var/tmp/swebox-test-venvs) with a lock, so parallel runs make it once. swebox's sandbox, cache and tasks
need only the standard library, so ``pip install -e . --no-deps`` is the whole of swebox's side.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.cached_venv import cached_venv

HARBOR = "harbor==0.25.0"
REPO = Path(__file__).resolve().parents[1]
CANDIDATES = ("/root/.pyenv/versions/3.12.1/bin/python", "python3.12")


def python312() -> str:
    """The 3.12 interpreter ($SWEBOX_PY312, pyenv's 3.12.1, or python3.12 on PATH); '' when there is none."""
    for candidate in (os.environ.get("SWEBOX_PY312", ""), *CANDIDATES):
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    return ""


def harbor_venv() -> Path:
    """The venv folder (made on first use; pip needs the package index the first time)."""
    return cached_venv("harbor-py312", python312(), [["install", HARBOR], ["install", "--no-deps", "-e", str(REPO)]])


def run_in(venv: Path, *argv: str, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A command of the venv (its bin/ first on PATH), output captured; litellm kept off the network."""
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
