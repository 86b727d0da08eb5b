"""Fixtures of the trainer tests: wandb kept offline (the shapes project's env layer is tests/conftest.py's
``shapes_env``, one per test process)."""

from __future__ import annotations

import pytest


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """wandb offline, with every folder it writes under tmp_path."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    yield
    import wandb

    wandb.teardown()  # stop wandb's service process: tests leave no processes behind
