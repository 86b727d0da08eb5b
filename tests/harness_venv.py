"""mini-swe-agent from PyPI in a venv that sandboxes can run: made with Debian's /usr/bin/python3 (>= 3.10, as
mini-swe-agent needs; /usr is bound into every sandbox), cached by tests/venvs.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.venvs import cached_venv

MINI_SWE_AGENT = "mini-swe-agent==2.4.6"


def mini_swe_agent_venv() -> Path:
    """The venv (made on first use: about 700 MB from the package index, a few minutes)."""
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.skip("needs the system's /usr/bin/python3 (mini-swe-agent runs on it inside the sandbox)")
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version_info >= (3, 10))"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if version != "True":
        pytest.skip("mini-swe-agent needs Python >= 3.10; /usr/bin/python3 is older")
    return cached_venv("mini-swe-agent", python, [MINI_SWE_AGENT])
