"""Signals the agent's code sends to pid 1 of its session: none may end the session (issue 11, class 3)."""

from __future__ import annotations

import pytest
from swebox.envs.sandbox import Sandbox


@pytest.mark.parametrize("sig", ["INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "ALRM", "PIPE", "TSTP", "RTMIN"])
def test_signals_to_pid_1_leave_the_session_alone(sandbox: Sandbox, sig: str):
    sandbox.exec("export KEPT=yes; cd /testbed")
    # from a child process, as the code under test would (the shell itself is not pid 1 either)
    sent = sandbox.exec(f"bash -c 'kill -{sig} 1' && echo sent")
    assert sent.output.strip() == "sent", sent.output
    after = sandbox.exec("echo $KEPT $PWD")  # the same shell: its exported variable and directory are there
    assert after.output.strip() == "yes /testbed", after.output


def test_the_shell_gets_default_signal_handlers_back(sandbox: Sandbox):
    # the supervisor ignores every signal; what the agent runs must not inherit that
    out = sandbox.exec("grep SigIgn /proc/self/status").output.split()
    assert int(out[1], 16) == 0, out


def test_signals_the_starter_ignored_are_default_again_in_the_shell(base_layer, work_root):
    """A host process that ignores the C library's reserved signal 32 (as some libraries leave it) starts a
    sandbox: the agent's shell must not inherit that (Python's signal module cannot reset it)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import ctypes, os, sys
        from swebox.envs.sandbox import Sandbox, SandboxPolicy
        ignore = ctypes.create_string_buffer(32)
        ignore[0] = 1  # SIG_IGN
        rt_sigaction = {"x86_64": 13, "aarch64": 134}[os.uname().machine]  # the C library refuses signal 32
        assert ctypes.CDLL(None).syscall(rt_sigaction, 32, ignore, None, 8) == 0
        print(open("/proc/self/status").read().split("SigIgn:")[1].split()[0])
        with Sandbox([sys.argv[1]], SandboxPolicy(work_root=sys.argv[2])) as sb:
            print(sb.exec("grep SigIgn /proc/self/status").output.split()[1])
    """)
    out = subprocess.run(
        [sys.executable, "-c", code, str(base_layer), work_root], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    host, shell = out.stdout.split()
    assert int(host, 16) & (1 << 31) and int(shell, 16) == 0, (host, shell)
