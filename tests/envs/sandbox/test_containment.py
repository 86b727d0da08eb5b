"""A hostile agent inside the sandbox: after each attack the host and other sandboxes are unchanged, and the
sandbox still works after reset()."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy


@pytest.fixture
def host_sentinel(tmp_path: Path):
    """A host file and a host process the agent must not be able to touch."""
    secret = Path("/tmp") / f"swebox-host-secret-{os.getpid()}"
    secret.write_text("host secret\n")
    os.chmod(secret, 0o644)
    proc = subprocess.Popen(["sleep", "600"])
    yield secret, proc
    alive = proc.poll() is None
    proc.kill()
    proc.wait()
    assert secret.read_text() == "host secret\n", "the host file changed"
    assert alive, "a host process was killed from inside the sandbox"
    secret.unlink()


def still_works(sb: Sandbox) -> None:
    sb.reset()
    r = sb.exec("cat /testbed/README && echo ok", timeout=30)
    assert r.output == "base\nok\n", r.output


def test_fork_bomb_is_contained(base_layer: Path, work_root: str, host_sentinel):
    policy = SandboxPolicy(work_root=work_root, max_processes=64)
    with Sandbox([base_layer], policy) as sb:
        uid = sb.host_uid  # a host uid of its own (uidslots.py), so the count below sees only this sandbox
        sb.exec("(:(){ :|:& };:) >/dev/null 2>&1 &", timeout=30)
        # the bomb grows at the pace the (shared, maybe loaded) CPUs allow: watch it reach the cap, and never pass it
        counts = [len(_host_processes_of(uid))]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(counts) < 15 or counts[-1] < 16):
            time.sleep(0.2)
            counts.append(len(_host_processes_of(uid)))
        assert 16 <= max(counts) <= 64 + 1, counts  # + nsinit, which counts outside the cgroup's pids
        still_works(sb)
        # left: nsinit, and the live session's supervisor and bash, and those of the session prepared for the
        # next reset (SandboxPolicy.warm_reset); the old session dies asynchronously
        assert _eventually_empty(lambda: len(_host_processes_of(uid)) > 5)


def _host_processes_of(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as f:
                if f"\nUid:\t{uid}\t" in f.read():
                    pids.append(int(name))
        except (OSError, ValueError):
            pass
    return pids


def test_memory_bomb_is_contained(base_layer: Path, work_root: str, host_sentinel):
    # the memory cgroup holds memory_mb plus the tmpfs sizes (SandboxPolicy.cgroup_memory_mb): small ones here
    policy = SandboxPolicy(work_root=work_root, memory_mb=256, upper_size_mb=64, tmp_size_mb=32)
    with Sandbox([base_layer], policy) as sb:
        r = sb.exec("python3 -c 'x = []\nwhile True: x.append(bytearray(16 << 20))'", timeout=60)
        assert r.exit_code != 0 and not r.timed_out
        assert "MemoryError" in r.output or "Killed" in r.output or r.exit_code in (137, -9, 1), r.output
        still_works(sb)


def test_filling_the_disk_stops_at_the_upper_size(base_layer: Path, work_root: str, host_sentinel):
    policy = SandboxPolicy(work_root=work_root, upper_size_mb=32, tmp_size_mb=16)
    with Sandbox([base_layer], policy) as sb:
        r = sb.exec("dd if=/dev/zero of=/testbed/big bs=1M count=200 2>&1; du -m /testbed/big", timeout=60)
        assert "No space left" in r.output
        assert int(r.output.strip().split()[-2]) <= 32
        r = sb.exec("dd if=/dev/zero of=/tmp/big bs=1M count=200 2>&1", timeout=60)
        assert "No space left" in r.output
        still_works(sb)


def test_binary_floods_are_capped(sandbox: Sandbox):
    r = sandbox.exec("cat /dev/urandom", timeout=2)
    assert r.timed_out and r.truncated
    assert len(r.output.encode("utf-8", "surrogatepass")) < 4 * sandbox.policy.max_output_bytes
    still_works(sandbox)


def test_host_files_outside_the_layers_are_invisible(sandbox: Sandbox, host_sentinel):
    secret, _ = host_sentinel
    r = sandbox.exec(f"cat /etc/shadow {secret} /root/.bashrc /work 2>&1; echo end")
    assert r.output.count("No such file or directory") == 4 and r.output.endswith("end\n")
    assert sandbox.exec("ls -A /home /root").output == "/home:\n\n/root:\n"
    r = sandbox.exec("cat /etc/passwd; ls /etc")
    assert r.output.startswith("root:x:0:0:root:/root:/bin/bash\nnobody:")
    assert "shadow" not in r.output


def test_writes_outside_the_sandbox_are_impossible(sandbox: Sandbox, host_sentinel):
    secret, _ = host_sentinel
    r = sandbox.exec(f"echo pwned > {secret}; echo pwned > /usr/pwned; touch /lib/x; echo $?")
    assert r.output.strip().endswith("1")
    assert not os.path.exists("/usr/pwned")
    still_works(sandbox)


def test_other_sandboxes_are_unreachable(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root)
    with Sandbox([base_layer], policy) as a, Sandbox([base_layer], policy) as b:
        a.exec("echo from-a > /testbed/a-only; echo tmp-a > /tmp/a-only; nohup sleep 600 >/dev/null 2>&1 &")
        # a's shell returns once it has forked the sleep, which is a bash, then nohup, until its exec of sleep
        assert _eventually(lambda: "sleep" in a.exec("ps -eo comm").output.split())
        r = b.exec("ls /testbed/a-only /tmp/a-only 2>&1; pgrep sleep; kill -9 -1; echo end")
        assert "No such file" in r.output and r.output.endswith("end\n")
        assert "sleep" in a.exec("sleep 0.2; ps -eo comm").output.split()
        assert a.read_file("/testbed/a-only") == b"from-a\n"


def test_killing_everything_only_kills_the_sandbox(sandbox: Sandbox, host_sentinel):
    _, proc = host_sentinel
    r = sandbox.exec(f"kill -9 -1; kill -9 {proc.pid}; pkill -9 sleep; pkill -9 python; echo survived")
    assert "survived" in r.output
    assert proc.poll() is None
    still_works(sandbox)


@pytest.mark.parametrize(
    "attack",
    [
        "mount -t tmpfs none /testbed",
        "mount -o remount,rw /usr",
        "mount --bind / /mnt",
        "umount /usr",
        "umount -l /proc",
        "mkdir -p /x && cd /x && pivot_root . .",
        "chroot /proc/1/root /bin/true",
        "ls /proc/1/root/",
        "unshare -U -r true",
        "unshare -m true",
        "mknod /dev/sdx b 8 0",
        "python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None).syscall(175, 0, 0, 0) != 0)'",  # init_module
        "echo 1 > /proc/sys/kernel/sysrq",
        "ls /sys/kernel",
        "python3 -c 'import os; os.chroot(\"/tmp\"); os.chdir(\"../../..\"); print(os.listdir(\".\"))'",
        "echo x > /usr/bin/x",
        "nsenter -t 1 -m true",
    ],
)
def test_privileged_operations_fail(sandbox: Sandbox, attack: str, host_sentinel):
    r = sandbox.exec(attack + "; echo rc=$?", timeout=30)
    rc = int(r.output.rsplit("rc=", 1)[1])
    assert rc != 0, r.output
    assert " /usr ro," in sandbox.exec("cat /proc/self/mountinfo").output
    still_works(sandbox)


def test_mountinfo_does_not_reveal_host_paths(sandbox: Sandbox, base_layer: Path):
    # and neither does the command line of pid 1, which nsinit started with the paths of its mounts
    mounts = sandbox.exec("cat /proc/self/mountinfo /proc/mounts /proc/1/cmdline").output
    assert str(base_layer) not in mounts
    assert sandbox.policy.resolved_work_root() not in mounts
    assert "/tmp/pytest" not in mounts


def test_no_network_but_loopback(sandbox: Sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:  # closed at the end of the test, as it should be: nothing connected
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        r = sandbox.exec(f'python3 -c "{code}"', timeout=20)
        assert r.exit_code != 0 and "Connection refused" in r.output
        assert sandbox.exec("ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3").output.split()[0] == "lo:"
        own = (
            "import socket; s = socket.socket(); s.bind(('127.0.0.1', 8000)); s.listen(); "
            "c = socket.create_connection(('127.0.0.1', 8000)); print('loopback ok')"
        )
        assert sandbox.exec(f'python3 -c "{own}"').output == "loopback ok\n"
        assert not accepted
    finally:
        server.close()


def test_each_sandbox_has_a_network_namespace_of_its_own(base_layer: Path, work_root: str):
    """Made ahead of time by the zygote (csrc/zygote.c) or by nsinit itself: never the host's, never shared, and
    a host abstract unix socket (those live in a network namespace) is out of reach."""
    abstract = f"swebox-netns-{os.getpid()}"
    host = socket.socket(socket.AF_UNIX)
    host.bind("\0" + abstract)
    host.listen(1)
    reach = (
        f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{abstract}')\" "
        "2>/dev/null && echo reached || echo refused; readlink /proc/self/ns/net"
    )
    policy = SandboxPolicy(work_root=work_root)
    try:
        with Sandbox([base_layer], policy) as first, Sandbox([base_layer], policy) as second:
            seen = [sb.exec(reach).output.split() for sb in (first, second)]
            first.reset()
            seen.append(first.exec(reach).output.split())
    finally:
        host.close()
    assert [answer for answer, _ in seen] == ["refused"] * 3, seen
    namespaces = [ns for _, ns in seen]
    assert namespaces[0] != namespaces[1] and namespaces[2] == namespaces[0]  # a reset keeps the sandbox's own
    assert os.readlink("/proc/self/ns/net") not in namespaces


def test_background_processes_do_not_survive_reset_or_close(base_layer: Path, work_root: str):
    marker = str(31337 + os.getpid())  # another test run on the machine must not count as ours

    def host_pids_of_sleep_marker() -> list[int]:
        pids = []
        for name in os.listdir("/proc"):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f"sleep\0{marker}".encode() in f.read():
                        pids.append(int(name))
            except (OSError, ValueError):
                pass
        return pids

    sb = Sandbox([base_layer], SandboxPolicy(work_root=work_root)).start()
    sb.exec(f"nohup sleep {marker} >/dev/null 2>&1 & setsid sleep {marker} & disown")
    assert _eventually(lambda: len(host_pids_of_sleep_marker()) == 2)
    sb.reset()
    assert _eventually_empty(host_pids_of_sleep_marker)
    sb.exec(f"nohup sleep {marker} >/dev/null 2>&1 &")
    assert _eventually(lambda: len(host_pids_of_sleep_marker()) == 1)
    sb.close()
    assert _eventually_empty(host_pids_of_sleep_marker)


def _eventually(condition, seconds: float = 60.0) -> bool:
    """The condition holds within ``seconds`` (processes start and die asynchronously, slower under load)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _eventually_empty(probe, seconds: float = 60.0) -> bool:
    return _eventually(lambda: not probe(), seconds)


def test_host_side_helpers_never_follow_links_out(sandbox: Sandbox, host_sentinel):
    secret, _ = host_sentinel
    sandbox.exec(
        f"ln -s {secret} /testbed/link; ln -s ../../../../../../../{secret} /testbed/rel; "
        "ln -s /etc/passwd /testbed/pw; ln -s /proc/1/root/etc /testbed/proc1"
    )
    for path in ("/testbed/link", "/testbed/rel"):
        with pytest.raises(SandboxError, match="no such file"):
            sandbox.read_file(path)
    for path in ("/testbed/link", "/testbed/rel"):
        sandbox.write_file(path, b"written through a link")  # lands inside the sandbox, never on the host
    assert sandbox.read_file("/testbed/pw").startswith(b"root:x:0:0")  # the sandbox's own /etc/passwd
    assert sandbox.read_file(str(secret)) == b"written through a link"
    with pytest.raises(SandboxError):
        sandbox.read_file("/testbed/proc1/shadow")


def test_commands_that_wait_or_never_end(sandbox: Sandbox):
    assert sandbox.exec("read line; echo got=$line; cat -", timeout=10).output == "got=\n"
    r = sandbox.exec("python3 -c 'import time\nwhile True: time.sleep(1)'", timeout=1)
    assert r.timed_out
    r = sandbox.exec("trap '' TERM INT HUP; sleep 1000", timeout=1)
    assert r.timed_out
    assert sandbox.exec("echo next").output == "next\n"


def test_signals_to_the_supervisor_are_ignored(sandbox: Sandbox):
    r = sandbox.exec("kill -9 1; kill -TERM 1; kill -STOP 1; echo alive")
    assert "alive" in r.output
    assert sandbox.exec("echo still").output == "still\n"


def test_sigkill_of_the_host_process_leaves_nothing(base_layer: Path, work_root: str):
    """The owner dies without closing: nsinit sees its control socket close and takes everything down, and the
    zygote that forked nsinit exits too."""
    script = (
        "import sys, time\n"
        "from swebox.envs.sandbox import Sandbox, SandboxPolicy, spawner\n"
        f"sb = Sandbox([{str(base_layer)!r}], SandboxPolicy(work_root={work_root!r})).start()\n"
        "sb.exec('nohup sleep 31338 >/dev/null 2>&1 &')\n"
        "print(sb.pid, spawner.zygote_pid(), flush=True)\n"
        "time.sleep(600)\n"
    )
    import sys

    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    init_pid, zygote_pid = proc.stdout.readline().split()
    # nsinit is a fork of the zygote (csrc/zygote.c, nsinit.c) that names itself; a pid reused meanwhile would
    # have another name
    marks = {init_pid: "nsinit", zygote_pid: "swebox-zygote"}
    for pid, mark in marks.items():  # alive, and recognisable below
        with open(f"/proc/{pid}/comm") as f:
            assert f.read().strip() == mark
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    def leftovers() -> list[str]:
        found = []
        for name in os.listdir("/proc"):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{name}/stat") as f:
                    comm, rest = f.read().split("(", 1)[1].rsplit(")", 1)
            except OSError:
                continue
            if rest.split()[0] == "Z":  # exited (this container's init may be slow to reap what it inherited)
                continue
            if b"31338" in cmd or marks.get(name) == comm:
                found.append(name)
        return found

    assert _eventually_empty(leftovers), leftovers()
