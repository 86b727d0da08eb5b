"""The zygote (csrc/zygote.c, spawner.py): every nsinit is a fork of one pre-started process per host process.
Its children must hold nothing of it, a dead zygote must be replaced without hurting live sandboxes, a bad
request must not stop it, and a process forked from the host must not share its parent's."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy, protocol, spawner
from swebox.envs.sandbox import sandbox as sandbox_module


def _sockets(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def _idle_sockets(zygote: int, deadline_s: float = 10.0) -> set[str]:
    """The zygote's sockets once it is idle: a few milliseconds after each fork it makes the next sandbox's
    network namespace and, for that moment, holds the socket that brings its loopback up."""
    end = time.monotonic() + deadline_s
    while len(found := _sockets(zygote)) > 1 and time.monotonic() < end:
        time.sleep(0.01)
    return found


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))


def test_nsinit_is_forked_by_the_zygote_and_holds_none_of_its_fds(base_layer: Path, work_root: str):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        zygote = spawner.zygote_pid()
        assert zygote and _parent(sb.pid) == zygote
        # the zygote holds one socket (its end of the host's); nsinit holds only its own control socket
        zygote_sockets = _idle_sockets(zygote)
        assert len(zygote_sockets) == 1, zygote_sockets
        assert not _sockets(sb.pid) & zygote_sockets
        fds = {int(fd) for fd in os.listdir(f"/proc/{sb.pid}/fd")}
        std = {os.readlink(f"/proc/{sb.pid}/fd/{fd}") for fd in (0, 1, 2)}
        assert std == {"/dev/null"}, std
        with open(f"/proc/{sb.pid}/stat") as f:
            session_id = int(f.read().rsplit(")", 1)[1].split()[3])
        assert session_id == sb.pid  # a session of its own, like the process it used to be started as
        assert sb.exec("echo ok").output == "ok\n"
        assert len(fds) < 16, fds
        # it is in the sandbox's cgroups (v1: it moved itself, by thread; v2: the zygote moved it), and so is
        # everything it made
        with open(f"/proc/{sb.pid}/cgroup") as f:
            memberships = f.read()
        for path in sb._limits.cgroup_dirs:
            assert path.rsplit("/", 1)[1] in memberships, (path, memberships)
        with open(f"/proc/{sb._live_shell().pid}/cgroup") as f:
            assert f.read() == memberships


def test_a_dead_zygote_is_replaced_and_live_sandboxes_do_not_notice(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as first:
        old = spawner.zygote_pid()
        dead = spawner.Child(old, os.pidfd_open(old))  # told the moment it has died
        os.kill(old, signal.SIGKILL)
        assert dead.exited(10.0)
        dead.release()
        assert first.exec("echo still").output == "still\n"
        first.reset()
        assert first.exec("echo reset").output == "reset\n"
        with Sandbox([base_layer], policy) as second:
            assert spawner.zygote_pid() not in (0, old)
            assert second.exec("echo new").output == "new\n"
    assert not os.path.exists(f"/proc/{old}")  # and the dead one was reaped, not left a zombie


def test_a_forked_host_process_starts_a_zygote_of_its_own(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy):
        parents = spawner.zygote_pid()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read_end)
                with Sandbox([base_layer], policy) as sb:
                    ok = sb.exec("echo child").output == "child\n"
                    mine = spawner.zygote_pid()
                    os.write(write_end, f"{int(ok)} {mine} {_parent(sb.pid)}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end) as f:
            ok, theirs, nsinit_parent = f.read().split()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ok == "1" and int(theirs) not in (0, parents) and int(nsinit_parent) == int(theirs)
        assert spawner.zygote_pid() == parents
        with Sandbox([base_layer], policy) as again:  # the parent's zygote still serves the parent
            assert _parent(again.pid) == parents


def test_a_cgroup_nsinit_cannot_join_fails_the_start_before_it_made_any_process(
    base_layer: Path, work_root: str, monkeypatch
):
    """nsinit works on its namespaces while the zygote moves it into the cgroups (an RCU grace period after an
    idle moment); if the move fails, it says so before its first process and the start fails cleanly."""
    created = sandbox_module.Limits.create

    def with_a_missing_cgroup(*args, **kwargs):
        limits = created(*args, **kwargs)
        limits.cgroup_dirs = [*limits.cgroup_dirs, os.path.join(work_root, "no-such-cgroup")]
        return limits

    monkeypatch.setattr(sandbox_module.Limits, "create", staticmethod(with_a_missing_cgroup))
    with pytest.raises(SandboxError, match="could not move nsinit into its cgroups: .*no-such-cgroup"):
        Sandbox([base_layer], SandboxPolicy(work_root=work_root)).start()
    assert os.listdir(work_root) == []  # its folder is gone, and with it the mounts (nsinit exited)


def test_bad_requests_are_answered_and_the_zygote_serves_on(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy):
        zygote = spawner._zygote
        old = spawner.zygote_pid()
        with spawner._lock:  # a spawn without a command line or a control socket
            protocol.send(zygote.sock, {"op": "spawn"})
            reply, fds = protocol.recv(zygote.sock)
        assert not fds and "expected a sandbox's command line and its control socket" in reply["error"]
        host_end, init_end = socket.socketpair()
        try:  # a command line nsinit cannot use: it exits before it does anything, and the host sees EOF
            child = spawner.spawn(["--ctl", "3", "--no-such-option"], [init_end.fileno()])
            init_end.close()
            assert child.exited(10.0)
            child.release()
            host_end.settimeout(10.0)
            assert host_end.recv(1) == b""
        finally:
            host_end.close()
            init_end.close()
        with Sandbox([base_layer], policy) as sb:  # the same zygote still starts sandboxes
            assert spawner.zygote_pid() == old and sb.exec("echo ok").output == "ok\n"
