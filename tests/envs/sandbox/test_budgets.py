"""Per-sandbox budgets (issue 11, class 8): one sandbox exhausting a per-user kernel budget (inotify instances,
pipe buffers) leaves host root and other sandboxes unharmed, each live sandbox runs as host ids of its own, and
a CPU hog with many processes cannot starve another sandbox."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-sandbox host uids need a root host process")

EXHAUST_INOTIFY = (
    "python3 -c \"import ctypes, time; libc = ctypes.CDLL(None); fds = []\n"
    "while libc.inotify_init1(0) >= 0: fds.append(1)\n"
    "print(len(fds), flush=True); time.sleep(60)\" > /tmp/n & "
    "for i in $(seq 600); do [ -s /tmp/n ] && break; sleep 0.1; done; cat /tmp/n"
)
ONE_INOTIFY = "python3 -c \"import ctypes; print(ctypes.CDLL(None).inotify_init1(0) >= 0)\""


def test_exhausting_inotify_in_one_sandbox_harms_nobody_else(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as hog, Sandbox([base_layer], policy) as other:
        made = int(hog.exec(EXHAUST_INOTIFY, timeout=90).output.split()[0])
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
        assert host_ok, (
            f"host root could not create an inotify instance ({os.strerror(ctypes.get_errno())}) "
            f"after a sandbox made {made}"
        )
        assert other_ok == "True\n", "another sandbox could not create an inotify instance"
        assert hog.owner_uid != other.owner_uid


# Pipes grown to the largest size until the kernel refuses (EPERM: the creating uid's pipe-user-pages-soft is
# nearly used up), then pipes of the default size until one is born small (2 pages instead of 16: used up); held
# for 60 s. Prints the pipes made, the errno of the refusal and the last pipe's size.
FILL_PIPES = (
    "python3 -c \"import fcntl, os, time  # pipe-hog\n"
    "size = min(1 << 20, int(open('/proc/sys/fs/pipe-max-size').read())); pipes = []; err = 0\n"
    "while len(pipes) < 1800:\n"
    "    r, w = os.pipe(); pipes.append((r, w))\n"
    "    if fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) < 65536: break\n"
    "    try: err or fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, size)\n"
    "    except OSError as e: err = e.errno\n"
    "print(len(pipes), err, fcntl.fcntl(pipes[-1][1], fcntl.F_GETPIPE_SZ), flush=True); time.sleep(60)\" > /tmp/p & "
    "for i in $(seq 600); do [ -s /tmp/p ] && break; sleep 0.1; done; cat /tmp/p"
)
ONE_PIPE = (
    "python3 -c \"import fcntl, os; r, w = os.pipe(); default = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)\n"
    "print(default, fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20))\""
)


def _real_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("\nUid:\t", 1)[1].split("\t", 1)[0])


@pytest.mark.skipif(
    int(Path("/proc/sys/fs/pipe-user-pages-soft").read_text()) == 0,
    reason="fs.pipe-user-pages-soft is 0: this host has no per-user pipe budget to exhaust",
)
def test_filling_the_pipe_budget_in_one_sandbox_leaves_another_its_pipes(base_layer: Path, work_root: str):
    """The kernel charges pipe buffers to the real host uid of the process growing the pipe: one block of host ids
    for every sandbox let one sandbox leave every other with 2-page pipes and F_SETPIPE_SZ failing with EPERM."""
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as hog, Sandbox([base_layer], policy) as other:
        try:
            made, errno_, after = map(int, hog.exec(FILL_PIPES, timeout=90).output.split())
            hogs = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(pid, b"pipe-hog")]
            hog_uids = {_real_uid(pid) for pid in hogs}
            other_pipe = other.exec(ONE_PIPE).output
            uids = (_real_uid(hog.pid), _real_uid(other.pid))
        finally:
            hog.reset()  # frees the hog's pipes at once, whatever the asserts say
        assert errno_ == 1 and after < 65536, (
            f"the hog did not exhaust its budget: {made} pipes, errno {errno_}, a new pipe of {after} bytes"
        )
        assert other_pipe == "65536 1048576\n", f"the other sandbox's pipe (default size, grown to 1 MiB): {other_pipe}"
        assert hog_uids == {hog.host_uid}, (hogs, hog_uids, hog.host_uid)
        assert uids == (hog.host_uid, other.host_uid) and abs(uids[0] - uids[1]) >= policy.uid_count, uids
        for sb in (hog, other):
            assert sb.limits_in_force()["kernel_budgets"].startswith("per sandbox: host ids"), sb.limits_in_force()


def _cmdline_has(pid: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


@pytest.mark.skipif(
    shutil.which("squashfuse") is None or shutil.which("mksquashfs") is None or not os.path.exists("/dev/fuse"),
    reason="needs squashfuse, mksquashfs and /dev/fuse",
)
def test_a_layer_that_cannot_be_id_mapped_makes_its_sandbox_share_the_layer_ids(tmp_path: Path, work_root: str):
    """A FUSE mount (squashfuse) of a layer packed as the layer ids cannot be id-mapped onto a sandbox's own block:
    that sandbox maps to the layer ids themselves, so its files still read as root's, and says its budgets are
    shared; a sandbox on a kernel squashfs mount of the same image gets a block of its own."""
    src = tmp_path / "src" / "testbed"
    src.mkdir(parents=True)
    (src / "README").write_text("packed\n")
    image, mnt = tmp_path / "layer.sqfs", tmp_path / "mnt"
    mnt.mkdir()
    uid = str(SandboxPolicy().host_uid)
    subprocess.run(
        [
            "mksquashfs",
            str(src.parent),
            str(image),
            "-noappend",
            "-quiet",
            "-no-progress",
            "-force-uid",
            uid,
            "-force-gid",
            uid,
        ],
        check=True,
        capture_output=True,
    )
    os.chmod(tmp_path, 0o755)
    seen = {}
    for kind, mount, unmount in (
        ("fuse", ["squashfuse", "-o", "allow_other"], ["fusermount3", "-u"]),
        ("kernel", ["mount", "-t", "squashfs", "-o", "loop,ro,nodev,nosuid"], ["umount"]),
    ):
        subprocess.run([*mount, str(image), str(mnt)], check=True)
        try:
            with Sandbox([mnt], SandboxPolicy(work_root=work_root)) as sb:
                out = sb.exec(
                    "stat -c '%u %U' /testbed/README && echo more >> /testbed/README && cat /testbed/README"
                ).output
                seen[kind] = (out, sb.host_uid, _real_uid(sb.pid), sb.limits_in_force()["kernel_budgets"])
        finally:
            subprocess.run([*unmount, str(mnt)], check=False)
    for out, *_ in seen.values():
        assert out == "0 root\npacked\nmore\n", seen  # owned by the sandbox's root, and copied up
    _, host_uid, real_uid, budgets = seen["fuse"]
    assert host_uid == real_uid == int(uid), seen
    assert budgets.startswith("shared ids: layer ") and "cannot be id-mapped" in budgets, budgets
    _, host_uid, real_uid, budgets = seen["kernel"]
    assert host_uid == real_uid != int(uid) and budgets.startswith("per sandbox: host ids"), seen


SPIN = (
    "python3 - <<'EOF'\n"
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
    "EOF"
)


def test_a_cpu_hog_with_many_processes_cannot_starve_another_sandbox(base_layer: Path, work_root: str):
    """32 spinning processes, each in a session of its own (so the kernel's autogroups do not group them), in one
    sandbox against 1 in another, for the same 3 s: with a CPU share per sandbox the single process gets about
    as much CPU as the whole hog; shared per process (or per session) it would get 1/32."""
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as hog, Sandbox([base_layer], policy) as victim:
        hog.exec(f"setsid bash -c \"$(cat <<'X'\n{SPIN.format(n=32, seconds=3)}\nX\n)\" > /tmp/cpu 2>&1 &")
        victim_cpu = float(victim.exec(SPIN.format(n=1, seconds=3), timeout=60).output)
        out = hog.exec(
            "for i in $(seq 600); do [ -s /tmp/cpu ] && break; sleep 0.1; done; cat /tmp/cpu", timeout=90
        ).output
        hog_cpu = float(out)
        share = hog.limits_in_force().get("cpu_share", "")
    assert victim_cpu >= 0.25 * hog_cpu, f"the victim got {victim_cpu:.2f} CPU s while the hog got {hog_cpu:.2f}"
    assert "cpu" in share, share
