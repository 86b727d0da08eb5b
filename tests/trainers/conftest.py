"""Fixtures of the trainer tests: the shapes project's env layer and its tasks, and wandb kept offline."""

from __future__ import annotations

import pytest

from tests.trainers.shapes import BUGGY, ORDER, TESTS, _ops, candidate_diffs


@pytest.fixture(scope="module")
def shapes_env(tmp_path_factory):
    """(env layer, tasks, candidates): the env layer is built in a real sandbox, like the cache builder does."""
    from swebox.envs.tasks import Task

    from tests.fixture_env import build_env_layer, discard_env_layer

    tmp = tmp_path_factory.mktemp("shapes")
    candidates = candidate_diffs(tmp)
    files = {
        "shapes/__init__.py": "",
        "shapes/ops.py": _ops({name: b for name, (b, _) in BUGGY.items()}),
        "tests/test_ops.py": TESTS,
    }
    layer = build_env_layer(files, "shapes")
    tasks = [
        Task(
            instance_id=f"shapes-{name}",
            repo="local/shapes",
            patch=candidates[name][ORDER[i][0]],
            problem_statement=f"{name} returns the wrong value.",
            FAIL_TO_PASS=[f"tests/test_ops.py::test_{name}"],
            PASS_TO_PASS=["tests/test_ops.py::test_double"],
        )
        for i, name in enumerate(BUGGY)
    ]
    yield layer, tasks, candidates
    discard_env_layer(layer)


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
