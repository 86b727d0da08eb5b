"""close(wait=False): the caller goes on at once, and the background thread still removes every trace: nsinit
and its processes, the cgroups, the working folder, the layer references; also when the program ends right
after closing, and when one sandbox's cleanup fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy, closer, wait_for_closes


def test_close_without_waiting_still_removes_everything(base_layer: Path, work_root: str):
    layer = Layer(base_layer)
    policy = SandboxPolicy(work_root=work_root)
    sandboxes = [Sandbox([layer], policy).start() for _ in range(4)]
    for sb in sandboxes:
        assert sb.exec("nohup sleep 31339 >/dev/null 2>&1 & echo started").output == "started\n"
    before = [(sb.pid, sb._dir, list(sb._limits.cgroup_dirs)) for sb in sandboxes]
    assert all(os.path.exists(folder) for _, folder, _ in before)
    for sb in sandboxes:
        sb.close(wait=False)
        sb.close(wait=False)  # safe twice, like close()
    assert wait_for_closes(timeout_s=60)
    for pid, folder, cgroups in before:
        assert not os.path.exists(f"/proc/{pid}")
        assert not os.path.exists(folder)
        assert not any(os.path.exists(path) for path in cgroups)
    assert layer._users == 0
    assert not any(name[0].isdigit() for name in os.listdir(work_root)), os.listdir(work_root)
    r = subprocess.run(["pgrep", "-f", "sleep 31339"], capture_output=True, text=True)
    assert r.stdout == "", r.stdout


def test_a_program_that_ends_right_after_closing_leaves_nothing(base_layer: Path, work_root: str):
    script = (
        "import os\n"
        "from swebox.envs.sandbox import Sandbox, SandboxPolicy\n"
        f"sb = Sandbox([{str(base_layer)!r}], SandboxPolicy(work_root={work_root!r})).start()\n"
        "sb.exec('true')\n"
        "print(sb.pid, sb._dir, *sb._limits.cgroup_dirs, flush=True)\n"
        "sb.close(wait=False)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    pid, folder, *cgroups = r.stdout.split()
    # checked the moment the program has exited: its exit waited for the background close
    assert not os.path.exists(folder)
    assert not any(os.path.exists(path) for path in cgroups)
    assert not os.path.exists(f"/proc/{pid}")


def test_a_failing_cleanup_does_not_stop_the_others(base_layer: Path, work_root: str, capfd):
    policy = SandboxPolicy(work_root=work_root)
    failing, fine = Sandbox([base_layer], policy).start(), Sandbox([base_layer], policy).start()
    real = failing._teardown

    def broken() -> None:
        real()
        raise OSError("injected")

    failing._teardown = broken
    fine_folder = fine._dir
    failing.close(wait=False)
    fine.close(wait=False)
    assert closer.wait_for_closes(timeout_s=60)
    assert not os.path.exists(fine_folder)
    assert "closing a sandbox in the background failed: OSError: injected" in capfd.readouterr().err
