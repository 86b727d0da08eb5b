"""No leaks: 1,000 start/exec/reset/close cycles leave the host with the same mounts, processes, open file
descriptors and files under the sandbox work folder as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy

from tests.leak_checks import settled

CYCLES = int(os.environ.get("SWEBOX_LEAK_CYCLES", "1000"))


def _mounts(*folders: str) -> int:
    """Mounts of this host namespace below our folders (the machine may be shared by other test runs)."""
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if any(line.split()[4].startswith(folder) for folder in folders))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _processes_of(policy: SandboxPolicy) -> int:
    """Host processes whose real uid is one the policy's sandboxes use (any slot's block, uidslots.py)."""
    count = 0
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as f:
                uid = int(f.read().split("\nUid:\t", 1)[1].split("\t", 1)[0])
        except (OSError, IndexError, ValueError):
            continue
        count += policy.host_uid <= uid < policy.uid_range_end
    return count


def _children() -> int:
    me = str(os.getpid())
    count = 0
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    count += 1
        except (OSError, IndexError):
            pass
    return count


def _files_under(folder: str) -> int:
    return sum(len(files) + len(dirs) for _, dirs, files in os.walk(folder))


def _cgroups() -> int:
    mine = f"swebox-{os.getpid()}-"
    total = 0
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if os.path.isdir(root):
            total += sum(1 for _, dirs, _ in os.walk(root) for d in dirs if d.startswith(mine))
    return total


@pytest.mark.e2e
def test_a_thousand_cycles_leak_nothing(base_layer: Path, work_root: str):
    # host uids of their own, above the whole range of the default policy (host_uid 100000 and 1,024 slots of
    # 65,536 ids: up to ~67.3M), so that sandboxes of other policies on this machine do not disturb the count
    policy = SandboxPolicy(work_root=work_root, host_uid=70_000_000, uid_slots=16)
    assert policy.host_uid >= SandboxPolicy(work_root=work_root).uid_range_end
    with Sandbox([base_layer], policy) as warm:  # first use creates lazily-made folders; not a leak
        warm.exec("true")
    folders = (work_root, str(base_layer))
    before = (_mounts(*folders), _open_fds(), _children(), _processes_of(policy), _files_under(work_root), _cgroups())
    for i in range(CYCLES):
        sb = Sandbox([base_layer], policy).start()
        r = sb.exec(f"echo {i} > /testbed/x; nohup sleep 1000 >/dev/null 2>&1 & cat /testbed/x")
        assert r.output == f"{i}\n", r.output
        sb.reset()
        assert sb.exec("ls /testbed/x").exit_code != 0
        sb.close()
    after = (
        settled(lambda: _mounts(*folders), before[0]),
        settled(_open_fds, before[1]),
        settled(_children, before[2]),
        settled(lambda: _processes_of(policy), before[3]),
        settled(lambda: _files_under(work_root), before[4]),
        settled(_cgroups, before[5]),
    )
    names = ("mounts", "open fds", "child processes", "sandbox processes", "files under work root", "cgroups")
    assert dict(zip(names, after, strict=True)) == dict(zip(names, before, strict=True))
