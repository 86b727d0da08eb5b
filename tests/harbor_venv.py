"""A Python 3.12 venv with the real ``harbor`` package and this checkout of swebox (editable, no torch extras).

harbor 0.25 requires Python >= 3.12 while the suite runs on 3.11, so its tests drive a venv of their own
(:func:`tests.venvs.cached_venv`). swebox's sandbox, cache and tasks need only the standard library, so
``pip install -e . --no-deps`` is the whole of swebox's side.
"""

from __future__ import annotations

from pathlib import Path

from tests.venvs import REPO, cached_venv, python, run_in

HARBOR = "harbor==0.25.0"
__all__ = ["HARBOR", "REPO", "harbor_venv", "python312", "run_in"]


def python312() -> str:
    """The 3.12 interpreter ($SWEBOX_PY312, pyenv's 3.12 build, or python3.12 on PATH); '' when there is none."""
    return python("3.12")


def harbor_venv() -> Path:
    """The venv folder (made on first use; pip needs the package index the first time)."""
    return cached_venv("harbor-py312", python312(), [HARBOR], pip_timeout=1200)
