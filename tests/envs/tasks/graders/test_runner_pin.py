"""runner_pin: the seccomp filter that keeps the runner's report channel on its fd, on this host's kernel (a real
filter in a real child process; the graded runs are tested in test_grading_origins.py)."""

from __future__ import annotations

import subprocess
import sys

from swebox.envs.tasks.graders import runner_pin

PROBE = r"""
import errno, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
import runner_pin
r, w = os.pipe()
fd = os.dup2(w, 150)
assert runner_pin.pin(fd) == ""

def refused(call, *args):
    try:
        call(*args)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return False

a, b = os.pipe()
out = {
    "dup2 onto it": refused(os.dup2, a, fd),
    "close it": refused(os.close, fd),
    "pin again (a second filter)": runner_pin.pin(os.dup(a)) != "",
    "dup2 elsewhere works": os.dup2(a, 151) == 151,
    "close elsewhere works": os.close(151) is None,
    "closerange over it leaves it": (os.closerange(100, 200), os.fstat(fd))[1] is not None,
    "not inherited by a program": subprocess.run(["ls", "/proc/self/fd/%d" % fd], capture_output=True).returncode != 0,
    "still writes": os.write(fd, b"x") == 1,
}
if os.fork() == 0:  # a forked helper carries the filter too
    os._exit(0 if refused(os.dup2, a, fd) else 1)
out["a forked child is refused too"] = os.wait()[1] == 0
print(out)
sys.exit(0 if all(out.values()) else 1)
"""


def test_the_pinned_fd_cannot_be_repointed_or_closed_and_everything_else_works():
    folder = str(runner_pin.__file__).rsplit("/", 1)[0]
    done = subprocess.run([sys.executable, "-I", "-c", PROBE, folder], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_filter_jumps_stay_inside_the_program():
    for machine in ("x86_64", "aarch64"):
        insns = runner_pin.program(machine, 123)
        for index, (code, jt, jf, _) in enumerate(insns):
            if code in (0x15, 0x35, 0x25):
                assert index + 1 + max(jt, jf) < len(insns)
        assert insns[-1] == (0x06, 0, 0, 0x7FFF0000) and insns[-2][3] == 0x00050001
