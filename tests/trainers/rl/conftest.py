"""The RL tests' fixtures: an empty sandbox for the tool-calling gateway tests (tool_chat.py's client runs in it)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """A sandbox over an empty layer (the client needs only the host's python3)."""
    root = tempfile.mkdtemp(prefix="swebox-test-", dir="/tmp")
    layer = tempfile.mkdtemp(prefix="swebox-test-layer-", dir="/tmp")
    os.chmod(root, 0o711)
    os.chmod(layer, 0o755)
    with Sandbox([layer], SandboxPolicy(work_root=root, command_timeout_s=120)) as box:
        yield box
    os.rmdir(layer)
    os.rmdir(root)
