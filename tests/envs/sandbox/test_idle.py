"""An idle sandbox sleeps: nsinit and the session's pid 1 block on their sockets and SIGCHLD, no timer wakes them;
and it is thin: none of its processes holds a Python interpreter."""

from __future__ import annotations

import os
import time

from swebox.envs.sandbox import Sandbox, SandboxPolicy, protocol


def wakeups(pid: int) -> int:
    """Times the process went to sleep and was woken (voluntary context switches, all its threads)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            total += sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
    return total


def settled(pids: list[int], quiet_s: float = 0.5, timeout_s: float = 60.0) -> dict[int, int]:
    """The processes' wakeup counts once none of them was woken for `quiet_s`: the sandbox's start-up work (the
    shell's start-up processes ending, each a SIGCHLD, a wakeup) is over. On a loaded machine that takes a
    while, so the test waits for it rather than for a fixed time. A process woken by a timer shorter than
    `quiet_s` never settles: the wait fails, as the test below would."""
    deadline = time.monotonic() + timeout_s
    counts = {pid: wakeups(pid) for pid in pids}
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = {pid: wakeups(pid) for pid in pids}
        if now == counts:
            return now
        counts = now
    raise AssertionError(f"the sandbox's processes were still woken every {quiet_s} s after {timeout_s} s: {counts}")


def test_an_idle_sandbox_is_never_woken(base_layer, work_root):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        assert sb.exec("true").exit_code == 0
        watched = {"nsinit": sb._proc.pid, "session pid 1": sb._live_shell().pid}
        settled(list(watched.values()))
        before = {name: wakeups(pid) for name, pid in watched.items()}
        time.sleep(5.0)  # polling every 0.2 s (nsinit) and 1 s (pid 1) woke them ~25 and ~5 times here
        after = {name: wakeups(pid) for name, pid in watched.items()}
        # no timer: at most one late event (a process of the shell's start-up ending) in 5 s
        assert all(after[name] - before[name] <= 1 for name in watched), (before, after)
        # ... and still reaps: a process orphaned to pid 1 that dies while the session is idle is gone at once,
        # not at the next tick (the old loop's was up to 1 s away)
        assert sb.exec("(sleep 0.3 &)").exit_code == 0
        time.sleep(0.8)
        r = sb.exec("grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
        assert r.output.strip() == "0", r.output
        assert sb.exec("echo ok").output == "ok\n"
        sb.reset()  # the session's pid 1 died: nsinit, woken by SIGCHLD, reaped it
        assert sb.exec("echo ok").output == "ok\n"


def test_an_idle_nsinit_is_c_and_still_serves(base_layer, work_root):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        with open(f"/proc/{sb.pid}/maps") as f:  # nsinit: a fork of the C zygote (csrc/nsinit.c, init.c)
            maps = f.read()
        with open(f"/proc/{sb.pid}/comm") as f:
            assert f.read().strip() == "nsinit"
        assert "libpython" not in maps and "python3" not in maps
        protocol.send(sb._ctl, {"op": "nope", "n": 1})  # answered, and the sandbox serves on
        assert protocol.recv(sb._ctl)[0] == {"error": "unknown request 'nope'"}
        sb.exec("echo x > /tmp/x")
        sb.reset()
        assert "No such file" in sb.exec("cat /tmp/x").output
