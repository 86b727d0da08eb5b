"""What tests that check nothing leaks ask: this process's sandbox folders, and a probe read until it settles."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from swebox.envs.sandbox import SandboxPolicy, wait_for_closes


def sandbox_folders() -> set[str]:
    """This process's sandbox working folders, once every close handed to the background has finished.

    Only folders named by this process (``PID-...``) count: the work root is shared with every other swebox job
    of this user on the machine (a demo, another test run), whose sandboxes come and go as they please."""
    assert wait_for_closes(timeout_s=120)
    root = SandboxPolicy().resolved_work_root()
    mine = f"{os.getpid()}-"
    return {n for n in os.listdir(root) if n.startswith(mine)} if os.path.isdir(root) else set()


def settled(probe: Callable[[], Any], expected: Any, seconds: float = 60.0) -> Any:
    """``probe()`` read until it gives ``expected`` or ``seconds`` pass; its last value (a close, an unmount or a
    thread's end lands a moment after the call that asked for it)."""
    deadline = time.monotonic() + seconds
    value = probe()
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        value = probe()
    return value
