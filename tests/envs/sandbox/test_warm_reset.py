"""warm_reset: after a reset, nsinit prepares the next session (a fresh writable layer, a started shell) so that
the next reset is a swap. Every reset must still give exactly the layers' state, and the prepared session must
never be reachable from the live one, nor outlive the sandbox."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy


def children(pid: int) -> set[int]:
    """The live children of `pid` (not zombies)."""
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found |= {int(p) for p in f.read().split()}
    return {p for p in found if state(p) not in ("Z", "X", "")}


def state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))


def pid_namespace(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def session_children(pid: int) -> set[int]:
    """nsinit's children that are a session's pid 1: in a PID namespace of their own. Not the short-lived
    starter of a session being prepared (it unshares the namespace, forks pid 1 and exits: it stays in
    nsinit's), which a test would otherwise take for the prepared session and find gone a moment later."""
    own = pid_namespace(pid)
    return {c for c in children(pid) if pid_namespace(c) not in ("", own)}


def sessions(sb: Sandbox, expect_prepared: int, ended: Iterable[int] = ()) -> tuple[int, set[int]]:
    """The live session's process (its pid 1, the shell's supervisor, nsinit's child) and the other sessions'
    pid 1s, once the killed session's processes (orphans of nsinit, the subreaper, for a moment) are gone.
    ``ended``: the pid 1s of the sessions a reset ended, never counted: one may still be exiting, and on a loaded
    machine it was once taken for the prepared session before the latter had started, then gone."""
    live = sb._live_shell().pid
    assert parent(live) == sb.pid
    deadline = time.monotonic() + 60
    skip = {live, *ended}
    while len(others := session_children(sb.pid) - skip) != expect_prepared and time.monotonic() < deadline:
        time.sleep(0.01)
    assert live in children(sb.pid)
    return live, others


def dirty(sb: Sandbox, round_: int) -> None:
    r = sb.exec(
        f"cd /testbed && echo {round_} > new && rm README && echo y >> pkg/__init__.py && "
        f"echo t > /tmp/t && export LEFT=over && nohup sleep 1000 >/dev/null 2>&1 & sleep 0.2"
    )
    assert r.exit_code == 0, r.output


def assert_pristine(sb: Sandbox) -> None:
    r = sb.exec("pwd; ls /testbed; cat /testbed/pkg/__init__.py; ls /tmp; echo LEFT=$LEFT; ps -eo comm --no-headers")
    lines = r.output.split("\n")
    # the session: its pid 1 (the supervisor), the shell and ps; nothing of the earlier session or the prepared one
    assert lines == ["/", "README", "gone.txt", "pkg", "VALUE = 1", "LEFT=", "supervisor", "bash", "ps", ""], r.output


@pytest.mark.parametrize("warm", [True, False])
def test_every_reset_gives_the_layers_state_warm_or_not(base_layer: Path, work_root: str, warm: bool):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root, warm_reset=warm)) as sb:
        assert sessions(sb, 0)[1] == set()  # nothing is prepared before the first reset
        uppers = set()
        for round_ in range(4):
            dirty(sb, round_)
            ended = {sb._live_shell().pid}
            sb.reset()
            uppers.add(sb._live_shell().upper)
            assert_pristine(sb)
            live, prepared = sessions(sb, 1 if warm else 0, ended)
            assert len(prepared) == (1 if warm else 0), (live, prepared)
        # warm: the two slots alternate; cold: the one slot is dropped and mounted again
        assert len(uppers) == (2 if warm else 1), uppers


def test_a_prepared_session_that_died_is_replaced_by_a_fresh_one(base_layer: Path, work_root: str):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        ended = {sb._live_shell().pid}
        sb.reset()
        _, (spare,) = sessions(sb, 1, ended)
        os.kill(spare, signal.SIGKILL)  # e.g. the OOM killer: its supervisor and shell die with it
        deadline = time.monotonic() + 60
        while spare in children(sb.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        dirty(sb, 0)
        ended = {spare, sb._live_shell().pid}
        sb.reset()
        assert_pristine(sb)
        assert len(sessions(sb, 1, ended)[1]) == 1  # and the next one is prepared again


def test_a_prepared_session_is_unreachable_from_the_live_one_and_dies_with_the_sandbox(
    base_layer: Path, work_root: str
):
    sb = Sandbox([base_layer], SandboxPolicy(work_root=work_root)).start()
    try:
        ended = {sb._live_shell().pid}
        sb.reset()
        _, (spare,) = sessions(sb, 1, ended)
        spare_tree = {spare, *children(spare)}
        # its own PID namespace and root: the live shell sees only itself, and no second writable layer
        r = sb.exec("ps -eo comm --no-headers; grep -c ' - overlay ' /proc/self/mountinfo")
        assert r.output.split() == ["supervisor", "bash", "ps", "1"], r.output
    finally:
        sb.close()
    assert not [pid for pid in spare_tree if os.path.exists(f"/proc/{pid}")]
