"""Fixtures of the whole suite: the calc project's env layer (tests/calc.py), built once per test process, and the
tiny agent program of the harness tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.calc import CALC_FILES
from tests.fixture_env import build_env_layer, discard_env_layer


@pytest.fixture(scope="session")
def calc_layer() -> Iterator[Path]:
    """An env layer folder: /testbed = the calc project in git (add and div are buggy), /venv with pytest."""
    layer = build_env_layer(CALC_FILES, "calc")
    yield layer.path
    discard_env_layer(layer)


@pytest.fixture
def tiny_agent_install() -> Iterator[str]:
    """A host folder (outside /tmp: each sandbox has its own) with tiny_agent.py, readable by the sandbox."""
    folder = tempfile.mkdtemp(prefix="swebox-tiny-agent-", dir="/var/tmp")
    shutil.copy(Path(__file__).parent / "envs" / "gateway" / "tiny_agent.py", folder)
    os.chmod(folder, 0o755)
    os.chmod(Path(folder) / "tiny_agent.py", 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
