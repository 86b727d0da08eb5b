"""Inode caps (issue 31, class 10): the writable layer, /tmp and /dev/shm hold at most the policy's count of
files, folders and links (ENOSPC inside past it, and the sandbox goes on), and a snapshot copies no more than
the writable layer could hold, so forks of a full sandbox cannot use up the host's inodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.sandbox.snapcopy import copy_tree

FILL = (
    "cd {where} && i=0; while [ $i -lt {count} ]; do i=$((i+1)); : > f$i 2>/tmp/why || break; done; "
    "echo made $i; cat /tmp/why"
)


def _policy(work_root: str, **fields) -> SandboxPolicy:
    return SandboxPolicy(work_root=work_root, command_timeout_s=120, **fields)


def _entries(folder: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(folder))


def test_policy_inode_fields_have_sane_defaults_and_are_checked(work_root):
    policy = SandboxPolicy()
    assert 10_000 <= policy.upper_inodes <= 1_000_000 and 10_000 <= policy.tmp_inodes <= 1_000_000
    with pytest.raises(SandboxError, match="upper_inodes: expected a positive integer"):
        SandboxPolicy(upper_inodes=0)


def test_creating_files_past_the_upper_cap_is_enospc_inside_and_the_sandbox_goes_on(base_layer, work_root):
    with Sandbox([base_layer], _policy(work_root, upper_inodes=2000, tmp_inodes=4000)) as sb:
        full = sb.exec(FILL.format(where="/testbed", count=5000)).output
        made = int(full.split("made ")[1].split()[0])
        assert made < 2000 and "No space left on device" in full, full
        assert "nr_inodes=2000" in sb.limits_in_force()["disk"]
        assert sb.exec("echo alive").output == "alive\n"  # the shell and the sandbox go on
        # /tmp has its own cap, and room: the writable layer's does not limit it
        tmp = sb.exec(FILL.format(where="/tmp", count=3000)).output
        assert tmp.startswith("made 3000"), tmp


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_creating_files_past_the_tmp_cap_is_enospc_inside(base_layer, work_root, where):
    with Sandbox([base_layer], _policy(work_root, tmp_inodes=500)) as sb:
        full = sb.exec(FILL.format(where=where, count=2000)).output
        assert int(full.split("made ")[1].split()[0]) <= 500 and "No space left on device" in full, full
        assert sb.exec("cd /testbed && mkdir many && cd many && touch $(seq 600) && ls | wc -l").output == "600\n"


def test_a_snapshot_of_a_full_upper_holds_no_more_than_the_cap_and_a_fork_gets_its_own(base_layer, work_root):
    policy = _policy(work_root, upper_inodes=1500)
    with Sandbox([base_layer], policy) as sb:
        sb.exec(FILL.format(where="/testbed", count=5000))
        snap = sb.snapshot()
        try:
            assert 1000 < _entries(snap.path) < 1500  # the whole full upper, and never past its cap
        finally:
            snap.acquire()
            snap.release()
        child = sb.fork()
        try:  # the child sees the parent's files and has a writable layer of the same cap of its own
            more = child.exec(
                "ls /testbed | wc -l; "
                + FILL.format(where="/tmp", count=10)
                + "; "
                + FILL.format(where="/testbed/pkg", count=5000)
            ).output
            assert int(more.split()[0]) > 1000 and 1000 < int(more.split("made ")[-1].split()[0]) < 1500, more
        finally:
            child.close()


def test_a_snapshot_over_the_cap_is_refused_with_a_clear_error_and_copies_nothing(base_layer, work_root):
    with Sandbox([base_layer], _policy(work_root)) as sb:
        sb.exec(FILL.format(where="/testbed", count=300))
        sb._upper_inodes = 100  # as if the upper held more than its tmpfs's cap allowed (another backend)
        snapshots = Path(work_root) / "snapshots"
        with pytest.raises(SandboxError, match=r"at most 100 files, folders and links .*upper_inodes"):
            sb.snapshot()
        assert not snapshots.exists() or not any(snapshots.iterdir())  # the partial copy is gone


def test_copy_tree_stops_at_max_entries_before_copying_past_it(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for i in range(50):
        (source / f"f{i}").write_text("x")
    assert copy_tree(str(source), str(tmp_path / "ok"), os.getuid(), 1, 1 << 20, max_entries=50) == 50
    with pytest.raises(SandboxError, match="at most 10 files"):
        copy_tree(str(source), str(tmp_path / "refused"), os.getuid(), 1, 1 << 20, max_entries=10)
    assert _entries(tmp_path / "refused") == 10
