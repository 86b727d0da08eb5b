"""Sandbox.run: the host's own commands in a fresh process of the session, out of the agent's shell's reach,
and a command channel no process of the agent can open through /proc (issue 31, class 7)."""

from __future__ import annotations

import time

import pytest
from swebox.envs.sandbox import SandboxError

COUNT = "cat /proc/[0-9]*/comm 2>/dev/null | grep -c -x {}"
"""How many processes of the session run one of these programs."""


def _wait_for(sandbox, path: str) -> bytes:
    deadline = time.monotonic() + 60
    while True:
        try:
            return sandbox.read_file(path)
        except SandboxError:
            assert time.monotonic() < deadline, f"{path} never appeared"
            time.sleep(0.1)


def test_run_is_a_fresh_process_whatever_the_shell_holds(sandbox):
    shaped = (
        "cd /testbed && export PATH=/nowhere FOO=agent && sh() { echo hijacked; }; "
        "/bin/sh() { echo hijacked; }; __swebox_run() { echo hijacked; }; alias true=false; "
        "set -T; trap 'echo trapped' DEBUG; enable -n echo"
    )
    assert sandbox.exec(shaped).exit_code == 0
    result = sandbox.run("pwd; echo $PATH; echo ${FOO:-unset}; echo out; echo err >&2; exit 3")
    assert result.stdout == b"/\n/usr/bin:/bin\nunset\nout\n" and result.stderr == "err\n"
    assert (result.exit_code, result.timed_out, result.truncated, result.ok) == (3, False, False, False)
    assert sandbox.run("true").ok


def test_run_keeps_stdout_whole_up_to_its_limit_and_says_when_cut(sandbox):
    whole = sandbox.run("head -c 3000000 /dev/zero")
    assert len(whole.stdout) == 3_000_000 and whole.ok  # no middle is cut, unlike exec's output
    cut = sandbox.run("head -c 3000000 /dev/zero", max_stdout=1000)
    assert len(cut.stdout) == 1000 and cut.truncated and cut.exit_code == 0 and not cut.ok
    with pytest.raises(SandboxError, match="expected positive"):
        sandbox.run("true", max_stdout=0)


def test_run_times_out_and_kills_what_it_started(sandbox):
    result = sandbox.run("sleep 1000 & sleep 1000", timeout=1)
    assert result.timed_out and result.exit_code is None
    deadline = time.monotonic() + 30  # SIGKILL is sent, not waited for
    while sandbox.run(COUNT.format("sleep")).stdout != b"0\n":
        assert time.monotonic() < deadline, "a process the timed-out command started survived"
        time.sleep(0.1)


def test_quiesce_kills_every_process_of_the_agent_and_the_shell_comes_back(sandbox):
    assert sandbox.exec("(sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 &").exit_code == 0
    # the shell returns once it has forked them; each is a bash until its exec of sleep, which can come later
    deadline = time.monotonic() + 60
    while sandbox.run(COUNT.format("sleep")).stdout != b"2\n":
        assert time.monotonic() < deadline, "the two background sleeps never both ran"
        time.sleep(0.05)
    assert sandbox.run(COUNT.format("-e sleep -e bash"), quiesce=True).stdout == b"0\n"
    after = sandbox.exec("echo back")
    assert after.exit_code == 0 and after.output.endswith("back\n") and "a new shell" in after.output


@pytest.mark.parametrize("fd", ["0", "100"])
def test_the_shells_command_channel_cannot_be_opened_through_proc(sandbox, fd):
    # a background process of the agent, while the shell idles with its channel at fd 0 and fd 100
    probe = (
        f"( sleep 1; for mode in r w rw; do case $mode in r) exec 3</proc/$$/fd/{fd};; "
        f"w) exec 3>/proc/$$/fd/{fd};; rw) exec 3<>/proc/$$/fd/{fd};; esac 2>/dev/null "
        "&& echo opened || echo refused; exec 3>&-; done > /tmp/tried; "
        "chmod 666 /proc/$$/fd/100 2>/dev/null && echo chmod >> /tmp/tried; "
        "echo done >> /tmp/tried ) >/dev/null 2>&1 &"
    )
    assert sandbox.exec(probe).exit_code == 0
    tried = _wait_for(sandbox, "/tmp/tried")
    while not tried.endswith(b"done\n"):
        time.sleep(0.1)
        tried = sandbox.read_file("/tmp/tried")
    assert tried == b"refused\nrefused\nrefused\ndone\n"
    assert sandbox.exec("echo still fine").output == "still fine\n"


def _state(sandbox, pid: str) -> str:
    stat = sandbox.run(f"cat /proc/{pid}/stat").stdout.decode()
    return stat.rsplit(")", 1)[1].split()[0] if stat else ""


def test_freeze_stops_the_agents_processes_for_the_command_and_continues_them(sandbox):
    pid = sandbox.exec("sleep 1000 >/dev/null 2>&1 & echo $!").output.strip()
    assert sandbox.exec(f"kill -STOP {pid}").exit_code == 0  # one the agent stopped itself stays stopped
    deadline = time.monotonic() + 60  # kill returns before the signal is delivered: wait until it is stopped
    while _state(sandbox, pid) != "T":
        assert time.monotonic() < deadline, "the agent's SIGSTOP never took effect"
        time.sleep(0.05)
    other = sandbox.exec("(while :; do :; done) >/dev/null 2>&1 & echo $!").output.strip()
    seen = sandbox.run(f"cat /proc/{other}/stat /proc/{pid}/stat | sed 's/.*) //' | cut -c1", freeze=True)
    assert seen.stdout == b"T\nT\n"  # both stopped while the command ran
    assert _state(sandbox, other) in ("R", "S") and _state(sandbox, pid) == "T"  # only the first continues
    assert sandbox.exec("echo the shell goes on").output == "the shell goes on\n"
