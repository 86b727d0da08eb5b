"""Jobs that share a work root but not a PID namespace (containers, CI runners, `unshare --pid`) leave each
other's live sandboxes alone, their folders and their cgroups; folders and cgroups of sandboxes whose owner died
are still swept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.sandbox.limits import pid_namespace
from swebox.envs.sandbox.sandbox import CGROUP_PREFIX

# Starts one sandbox (its first start sweeps the work root), uses it, and closes it.
OTHER_JOB = textwrap.dedent("""
    import sys
    from swebox.envs.sandbox import Sandbox, SandboxPolicy
    with Sandbox([sys.argv[1]], SandboxPolicy(work_root=sys.argv[2], command_timeout_s=30)) as sb:
        r = sb.exec("cat /testbed/README")
        assert r.exit_code == 0 and r.output == "base\\n", r
        sb.reset()
    print("other job done")
""")


def _cgroups_named(sb: Sandbox, name: str) -> list[Path]:
    """Empty cgroups called `name` beside each of the sandbox's own (where it has cgroups)."""
    folders = [Path(os.path.dirname(path)) / name for path in sb._limits.cgroup_dirs]
    for folder in folders:
        folder.mkdir()
    return folders


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_job_in_another_pid_namespace_keeps_my_sandbox_alive(base_layer: Path, work_root: str) -> None:
    policy = SandboxPolicy(work_root=work_root, command_timeout_s=30)
    with Sandbox([base_layer], policy) as mine:
        assert mine.exec("echo mine > /testbed/MINE").exit_code == 0
        # a sandbox of mine being started: its cgroups exist and are empty until its nsinit joins them (the
        # other job's sweep once removed such cgroups, as their owner's pid did not exist in its namespace)
        starting = _cgroups_named(mine, f"{CGROUP_PREFIX}{pid_namespace()}-{os.getpid()}-999998-abcdef")
        # the other job sees its own /proc, where my pid does not exist
        other = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", OTHER_JOB, str(base_layer), work_root],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode == 0, other.stderr
        assert "other job done" in other.stdout
        # my sandbox's folder survived the other job's sweep: my files and reset still work
        assert mine.exec("cat /testbed/MINE").output == "mine\n"
        mine.reset()
        assert mine.exec("test -e /testbed/MINE; echo $?").output == "1\n"
        assert all(folder.is_dir() for folder in starting), starting
        for folder in starting:
            folder.rmdir()
    assert [n for n in os.listdir(work_root) if n[0].isdigit() or n.startswith(".new-")] == []


def test_a_dead_owners_folder_is_swept(base_layer: Path, work_root: str) -> None:
    # a folder in the sandbox naming scheme that nobody holds locked: its owner died without closing it
    stale = Path(work_root, f"{os.getpid()}-999999-abcdef")
    (stale / "mnt").mkdir(parents=True)
    crashed = Path(work_root, ".new-1-2-abcdef")  # a crash between creating and renaming, long ago
    crashed.mkdir()
    os.utime(crashed, (0, 0))
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:  # (where this host puts cgroups)
        left = _cgroups_named(sb, f"{CGROUP_PREFIX}{pid_namespace()}-{dead}-1-abcdef")  # its owner crashed
    subprocess.run(
        [sys.executable, "-c", OTHER_JOB, str(base_layer), work_root], check=True, capture_output=True, timeout=120
    )
    assert not stale.exists()
    assert not crashed.exists()
    assert not any(folder.exists() for folder in left), left
