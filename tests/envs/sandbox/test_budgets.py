"""Per-sandbox budgets (issue 11, class 8): one sandbox exhausting a per-user kernel budget (inotify instances)
leaves host root and other sandboxes unharmed, and a CPU hog with many processes cannot starve another sandbox."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-sandbox host uids need a root host process")

EXHAUST_INOTIFY = (
    "python3 -c \"import ctypes, time; libc = ctypes.CDLL(None); fds = []\n"
    "while libc.inotify_init1(0) >= 0: fds.append(1)\n"
    "print(len(fds), flush=True); time.sleep(60)\" > /tmp/n & "
    "for i in $(seq 100); do [ -s /tmp/n ] && break; sleep 0.1; done; cat /tmp/n"
)
ONE_INOTIFY = "python3 -c \"import ctypes; print(ctypes.CDLL(None).inotify_init1(0) >= 0)\""


def test_exhausting_inotify_in_one_sandbox_harms_nobody_else(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as hog, Sandbox([base_layer], policy) as other:
        made = int(hog.exec(EXHAUST_INOTIFY, timeout=30).output.split()[0])
        assert made > 0
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(0)
            host_ok = fd >= 0
            if host_ok:
                os.close(fd)
            other_ok = other.exec(ONE_INOTIFY).output
        finally:
            hog.reset()  # frees the hog's instances at once, whatever the asserts say
        assert host_ok, f"host root could not create an inotify instance ({os.strerror(ctypes.get_errno())}) " \
                        f"after a sandbox made {made}"
        assert other_ok == "True\n", "another sandbox could not create an inotify instance"
        assert hog.owner_uid != other.owner_uid


SPIN = ("python3 - <<'EOF'\n"
        "import os, time\n"
        "n, seconds = {n}, {seconds}\n"
        "for _ in range(n - 1):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"  # a session (so a scheduler autogroup) per process: no grouping but ours
        "        end = time.time() + seconds\n"
        "        while time.time() < end: pass\n"
        "        os._exit(0)\n"
        "end = time.time() + seconds\n"
        "while time.time() < end: pass\n"
        "while True:\n"
        "    try: os.wait()\n"
        "    except ChildProcessError: break\n"
        "t = os.times()\n"
        "print(t.user + t.system + t.children_user + t.children_system)\n"
        "EOF")


def test_a_cpu_hog_with_many_processes_cannot_starve_another_sandbox(base_layer: Path, work_root: str):
    """32 spinning processes, each in a session of its own (so the kernel's autogroups do not group them), in one
    sandbox against 1 in another, for the same 3 s: with a CPU share per sandbox the single process gets about
    as much CPU as the whole hog; shared per process (or per session) it would get 1/32."""
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as hog, Sandbox([base_layer], policy) as victim:
        hog.exec(f"setsid bash -c \"$(cat <<'X'\n{SPIN.format(n=32, seconds=3)}\nX\n)\" > /tmp/cpu 2>&1 &")
        victim_cpu = float(victim.exec(SPIN.format(n=1, seconds=3), timeout=60).output)
        out = hog.exec("for i in $(seq 100); do [ -s /tmp/cpu ] && break; sleep 0.1; done; cat /tmp/cpu",
                       timeout=30).output
        hog_cpu = float(out)
        share = hog.limits_in_force().get("cpu_share", "")
    assert victim_cpu >= 0.25 * hog_cpu, f"the victim got {victim_cpu:.2f} CPU s while the hog got {hog_cpu:.2f}"
    assert "cpu" in share, share
