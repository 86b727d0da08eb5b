"""swebox.trainers.skyrl_entry: settings from the environment, registration, and a clear error without skyrl."""

from __future__ import annotations

import importlib.util

import pytest
import skyrl_gym
from swebox.trainers import skyrl_entry


def test_settings_from_environment():
    assert skyrl_entry.settings_from_environment({}) == {}
    assert skyrl_entry.settings_from_environment({"SWEBOX_SKYRL_SETTINGS": '{"max_turns": 4}'}) == {"max_turns": 4}
    with pytest.raises(ValueError, match="invalid JSON"):
        skyrl_entry.settings_from_environment({"SWEBOX_SKYRL_SETTINGS": "{max_turns: 4"})
    with pytest.raises(ValueError, match="expected a JSON object; found list"):
        skyrl_entry.settings_from_environment({"SWEBOX_SKYRL_SETTINGS": "[1]"})


def test_register_inside_the_entrypoint_is_idempotent():
    skyrl_entry.register({"SWEBOX_SKYRL_SETTINGS": '{"max_turns": 4}'})
    assert "swebox" in skyrl_gym.registry
    assert skyrl_entry.register({}) is False


@pytest.mark.skipif(
    importlib.util.find_spec("skyrl") is not None or importlib.util.find_spec("skyrl_train") is not None,
    reason="SkyRL's trainer is installed",
)
def test_without_skyrl_the_error_says_how_to_install_it():
    with pytest.raises(ImportError, match="SkyRL's trainer is not installed"):
        skyrl_entry.skyrl_modules()


def test_a_misconfigured_entry_point_is_one_line():
    import os
    import subprocess
    import sys

    env = {**os.environ, "SWEBOX_SKYRL_SETTINGS": "{bad"}
    env.pop("SWEBOX_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "swebox.trainers.skyrl_entry"], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines == [
        "python -m swebox.trainers.skyrl_entry: error: $SWEBOX_SKYRL_SETTINGS: expected a JSON object "
        "such as '{\"max_turns\": 30}'; found invalid JSON (Expecting property name enclosed in double "
        "quotes at column 2). [SWEBOX_DEBUG=1 shows the traceback]"
    ]
