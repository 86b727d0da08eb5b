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
