"""Host-side helpers handed sandbox-controlled data (issue 11, classes 4-7): each test is a real attack from
inside a real sandbox against a helper that runs as the host (read_file/write_file, snapshot, reset, layers)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy


def _in_thread(fn, timeout: float = 10.0):
    """Run `fn` in a thread; (finished, result or exception)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test
            box["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), box.get("value"), thread


def test_file_helpers_refuse_fifos_without_blocking(sandbox: Sandbox):
    """A FIFO at a path the host reads or writes must not block the host thread (it holds the sandbox's lock)."""
    r = sandbox.exec("mkfifo /testbed/fifo /testbed/wfifo && ln -s /testbed/fifo /testbed/to_fifo && echo ok")
    assert r.output == "ok\n", r.output
    host_view = f"/proc/{sandbox._live_shell().pid}/root/testbed"
    for call, unblock in (
        (lambda: sandbox.read_file("/testbed/fifo"), ("fifo", os.O_WRONLY)),
        (lambda: sandbox.read_file("/testbed/to_fifo"), ("fifo", os.O_WRONLY)),
        (lambda: sandbox.read_tail("/testbed/fifo", 10), ("fifo", os.O_WRONLY)),
        (lambda: sandbox.write_file("/testbed/wfifo", b"x"), ("wfifo", os.O_RDONLY)),
    ):
        finished, value, thread = _in_thread(call, timeout=10.0)
        if not finished:  # the old helpers block in open(): free the thread before failing
            fd = os.open(f"{host_view}/{unblock[0]}", unblock[1] | os.O_NONBLOCK)
            os.close(fd)
            thread.join(10.0)
        assert finished, "a host-side file helper blocked on a FIFO planted by the agent"
        assert isinstance(value, SandboxError) and "FIFO" in str(value), value
    # the sandbox is still usable, and regular files (also through links inside the sandbox) still work
    sandbox.write_file("/testbed/plain", b"data")
    assert sandbox.read_file("/testbed/plain") == b"data"
    assert sandbox.exec("cat /testbed/plain").output == "data"
    with pytest.raises(SandboxError, match="character device"):
        sandbox.read_file("/dev/zero")
    # read_tail: the file's last bytes, all of it when it is shorter
    sandbox.write_file("/testbed/long", b"0123456789" * 1000 + b"END")
    assert sandbox.read_tail("/testbed/long", 13) == b"0123456789END"
    assert sandbox.read_tail("/testbed/plain", 4000) == b"data"


def test_the_editor_view_of_a_fifo_fails_at_once(sandbox: Sandbox):
    from swebox.envs.agent.editor import Editor, EditorError

    sandbox.exec("mkfifo /testbed/pipe")
    finished, value, thread = _in_thread(lambda: Editor(sandbox).view("/testbed/pipe"), timeout=10.0)
    if not finished:
        os.close(os.open(f"/proc/{sandbox._live_shell().pid}/root/testbed/pipe", os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10.0)
    assert finished, "the editor's view blocked on a FIFO"
    assert isinstance(value, EditorError) and "FIFO" in str(value), value


SYSV_SHM = (
    "python3 -c \"import ctypes; libc = ctypes.CDLL(None); "
    "print(libc.shmget(0x5eb0c5, 4096, 0o1000 | 0o600) >= 0)\""  # IPC_CREAT: a segment that outlives its maker
)


def test_reset_gives_a_new_ipc_namespace(sandbox: Sandbox):
    """SysV IPC outlives the processes that made it; a reset must not hand it to the next session."""
    assert sandbox.exec(SYSV_SHM).output == "True\n"
    assert str(0x5EB0C5) in sandbox.exec("cat /proc/sysvipc/shm").output
    sandbox.reset()
    left = sandbox.exec("tail -n +2 /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem").output
    assert str(0x5EB0C5) not in left, f"a SysV shm segment survived reset():\n{left}"
    ipc_before = sandbox.exec("readlink /proc/self/ns/ipc").output
    sandbox.reset()
    assert sandbox.exec("readlink /proc/self/ns/ipc").output != ipc_before


@pytest.fixture
def root_only_host_folder():
    """A host folder only host root may read, named the way a venv's interpreter prefix is."""
    folder = Path(f"/root/swebox-i11-secret-{os.getpid()}")
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    (folder / "bin" / "secret").write_text("host root only\n")
    os.chmod(folder, 0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs host-root-only files to aim at")
def test_an_agent_written_pyvenv_cfg_binds_no_host_folder(
    base_layer: Path, work_root: str, root_only_host_folder: Path
):
    """pyvenv.cfg in the agent's tree names a root-only host folder; neither fork() nor a new sandbox on a
    snapshot of that tree may bind it (the interpreters a layer needs come from its maker's record only)."""
    secret = root_only_host_folder / "bin" / "secret"
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        plant = (
            f"mkdir -p /evil /testbed/venv2 && printf 'home = {secret.parent}\\n' > /evil/pyvenv.cfg && "
            f"printf 'home = {root_only_host_folder}\\n' > /testbed/venv2/pyvenv.cfg && echo ok"
        )
        assert sb.exec(plant).output == "ok\n"
        with sb.fork() as child:
            r = child.exec(f"cat {secret} 2>&1; ls {root_only_host_folder} 2>&1")
            assert "host root only" not in r.output, r.output
            assert "No such file" in r.output, r.output
        snap = sb.snapshot().persist()
    try:
        assert snap.interpreters == ()
        with Sandbox([base_layer, snap.path], SandboxPolicy(work_root=work_root)) as sb2:
            assert sb2.exec("cat /evil/pyvenv.cfg").exit_code == 0  # the planted file is there ...
            r = sb2.exec(f"cat {secret} 2>&1")
            assert "host root only" not in r.output, r.output  # ... and bound nothing
    finally:
        shutil.rmtree(snap.path, ignore_errors=True)


SWAPPER = r'''
import os, sys, time
secret, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
os.chdir("/testbed/race")
end = time.time() + seconds
while time.time() < end:
    for i in range(n):
        try:
            os.symlink(secret, f"l{i}")
            os.rename(f"l{i}", f"f{i}")  # a regular file becomes an absolute link to a host file ...
            with open(f"t{i}", "w") as f:
                f.write("innocent\n")
            os.rename(f"t{i}", f"f{i}")  # ... and back
        except OSError:
            pass
'''


def _contents(folder: Path) -> bytes:
    data = b""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data += path.read_bytes()
    return data


@pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs host-root-only files to aim at")
def test_snapshot_never_follows_a_link_swapped_in_while_copying(
    base_layer: Path, work_root: str, root_only_host_folder: Path
):
    secret = root_only_host_folder / "bin" / "secret"
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:
        sb.write_file("/testbed/swapper.py", SWAPPER)
        sb.exec("mkdir /testbed/race && cd /testbed/race && for i in $(seq 0 59); do echo innocent > f$i; done")
        sb.exec(f"for k in 1 2 3; do nohup python3 /testbed/swapper.py {secret} 60 30 >/dev/null 2>&1 & done")
        leaked, failed = 0, []
        for _ in range(25):
            try:
                snap = sb.snapshot()
            except OSError as exc:  # the agent's churn must not make a snapshot fail either
                failed.append(exc)
                continue
            try:
                leaked += b"host root only" in _contents(snap.path)
            finally:
                shutil.rmtree(snap.path, ignore_errors=True)
        assert leaked == 0, f"{leaked} of 25 snapshots copied a root-only host file through a swapped-in link"
        assert not failed, f"{len(failed)} of 25 snapshots failed: {failed[0]}"


def test_snapshot_keeps_sparse_files_sparse_links_linked_and_drops_setuid(sandbox: Sandbox):
    r = sandbox.exec(
        "cd /testbed && truncate -s 256M sparse && printf data | dd of=sparse bs=1 seek=4096 "
        "conv=notrunc status=none && ln sparse l1 && ln sparse l2 && ln sparse l3 && "
        "cp /bin/true suid && chmod 6755 suid && mkdir sgid && chmod 2775 sgid && echo ok"
    )
    assert r.output == "ok\n", r.output
    snap = sandbox.snapshot()
    try:
        tb = snap.path / "testbed"
        st = os.stat(tb / "sparse")
        assert st.st_size == 256 * 1024 * 1024
        assert st.st_blocks * 512 <= 64 * 1024, f"the sparse file takes {st.st_blocks * 512} bytes on disk"
        assert {os.stat(tb / n).st_ino for n in ("sparse", "l1", "l2", "l3")} == {st.st_ino}
        assert st.st_nlink == 4
        with open(tb / "sparse", "rb") as f:
            f.seek(4096)
            assert f.read(4) == b"data"
        assert not os.stat(tb / "suid").st_mode & 0o6000, oct(os.stat(tb / "suid").st_mode)
        assert os.stat(tb / "sgid").st_mode & 0o7777 == 0o2775  # setgid on a folder only picks the group
        with Sandbox([*sandbox.layers, snap], sandbox.policy) as child:  # the copy still works as a layer
            assert child.exec("cd /testbed && cmp l3 sparse && ./suid && echo same").output == "same\n"
    finally:
        shutil.rmtree(snap.path, ignore_errors=True)


def test_snapshot_copies_at_most_the_cap(sandbox: Sandbox, tmp_path: Path):
    """The copy stops at `max_bytes` (the writable layer's size) even if the tree grows while it is copied."""
    from swebox.envs.sandbox import snapcopy

    sandbox.exec("head -c 100000 /dev/urandom > /testbed/blob")
    upper = f"/proc/{sandbox.pid}/root{sandbox._live_shell().upper}"
    with pytest.raises(SandboxError, match="at most 50000 bytes"):
        snapcopy.copy_tree(upper, str(tmp_path / "capped"), sandbox.host_uid, 65536, 50000)
    assert snapcopy.copy_tree(upper, str(tmp_path / "whole"), sandbox.host_uid, 65536, 200000) >= 2
    sandbox.exec(f"mkdir -p /testbed/{'d/' * (snapcopy.MAX_DEPTH + 5)}")  # deeper than the walk goes
    with pytest.raises(SandboxError, match="nested at most"):
        sandbox.snapshot()
    assert not list((Path(sandbox.policy.resolved_work_root()) / "snapshots").glob(f"{os.getpid()}-*")), (
        "a failed snapshot left its folder behind"
    )
