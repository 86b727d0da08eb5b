"""The sandbox working folders this test process has left, for tests that check nothing leaks."""

from __future__ import annotations

import os

from swebox.envs.sandbox import SandboxPolicy, wait_for_closes


def sandbox_folders() -> set[str]:
    """This process's sandbox working folders, once every close handed to the background has finished.

    Only folders named by this process (``PID-...``) count: the work root is shared with every other swebox job
    of this user on the machine (a demo, another test run), whose sandboxes come and go as they please."""
    assert wait_for_closes(timeout_s=120)
    root = SandboxPolicy().resolved_work_root()
    mine = f"{os.getpid()}-"
    return {n for n in os.listdir(root) if n.startswith(mine)} if os.path.isdir(root) else set()
