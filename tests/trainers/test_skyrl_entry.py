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


@pytest.mark.skipif(importlib.util.find_spec("skyrl") is not None or importlib.util.find_spec("skyrl_train")
                    is not None, reason="SkyRL's trainer is installed")
def test_without_skyrl_the_error_says_how_to_install_it():
    with pytest.raises(ImportError, match="SkyRL's trainer is not installed"):
        skyrl_entry.skyrl_modules()
