"""Fixtures of the whole suite: the calc project's env layer (tests/calc.py), built once per test process."""

from __future__ import annotations

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
