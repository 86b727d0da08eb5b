"""Fixtures for sandbox tests: small layer folders written by the tests themselves."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy


@pytest.fixture
def work_root() -> str:
    """A fresh work root reachable by the sandbox's unprivileged uid (pytest's tmp folders are 0700)."""
    root = tempfile.mkdtemp(prefix="swebox-test-", dir="/tmp")
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def base_layer(tmp_path: Path) -> Path:
    """A layer with a tiny repository at /testbed."""
    layer = tmp_path / "base"
    (layer / "testbed" / "pkg").mkdir(parents=True)
    (layer / "testbed" / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (layer / "testbed" / "README").write_text("base\n")
    (layer / "testbed" / "gone.txt").write_text("deleted by the task layer\n")
    for path in (tmp_path, layer, *layer.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return layer


@pytest.fixture
def task_layer(tmp_path: Path, base_layer: Path, work_root: str) -> Path:
    """A layer above base_layer, made the way tasks are: by snapshotting a sandbox's changes."""
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        r = sb.exec("cd /testbed && echo 'VALUE = 2' > pkg/__init__.py && rm gone.txt && echo new > NEW")
        assert r.exit_code == 0, r.output
        snap = sb.snapshot().persist()
    return snap.path


@pytest.fixture
def sandbox(base_layer: Path, work_root: str):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root, command_timeout_s=30)) as sb:
        yield sb
