"""The C shell supervisor (supervisor.c): what the host's text becomes in the shell and back, the output cap, the
requests it refuses, and how it is built and cached (native.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy, native, protocol


def test_the_command_reaches_the_shell_byte_for_byte(sandbox: Sandbox):
    # JSON escapes of every kind: BMP and astral characters, control characters, quotes and backslashes, a lone
    # surrogate standing for a raw byte (surrogateescape), and a NUL (dropped: the command travels NUL-ended)
    text = "é 𝄞 \t \" \\ \x01 \udcff\0end"
    r = sandbox.exec(f"printf '%s' '{text}' | od -An -tx1 | tr -s ' \\n' ' '")
    expected = text.replace("\0", "").encode("utf-8", "surrogateescape")
    assert r.exit_code == 0 and r.output.split() == [f"{b:02x}" for b in expected], r.output


def test_a_long_command_arrives_whole_and_what_it_runs_holds_no_extra_descriptor(sandbox: Sandbox):
    # the command travels in a memfd the shell reads in one go (supervisor.c); the programs it starts, in the
    # foreground or in the background, must not see that descriptor
    body = "".join(f"line {i}: é 𝄞 \\ $HOME '\" `x`\n" for i in range(3000))  # ~100 KB, read by bash at once
    fds = "python3 -c 'import os; print(sorted(os.listdir(\"/proc/self/fd\")))'"
    # the background program lists its own descriptors once it runs (`ls /proc/$!/fd` could look at bash's
    # child before its exec, while it still held bash's own)
    r = sandbox.exec(f"cat > /tmp/body <<'EOF'\n{body}EOF\n{fds}; {fds} & wait $!")
    assert r.exit_code == 0 and r.output.split("\n")[:2] == ["['0', '1', '2', '3']"] * 2, r.output
    assert sandbox.read_file("/tmp/body").decode() == body
    assert sandbox.exec("echo " + "y" * 1_500_000 + " | wc -c").output == "1500001\n"  # the memfd shrinks after it
    sandbox.exec("exec 3>/tmp/three")  # the descriptors a script uses stay the agent's across commands
    assert sandbox.exec("echo kept >&3; cat /tmp/three").output == "kept\n"


def test_a_lone_surrogate_no_byte_stands_for_is_the_commands_error(sandbox: Sandbox):
    r = sandbox.exec("echo \ud800")
    assert r.exit_code is None and "could not be run" in r.output
    assert sandbox.exec("echo fine").output == "fine\n"


def test_invalid_utf8_output_is_decoded_like_python_does(sandbox: Sandbox):
    raw = b"ok \xff \xe2\x82 \xf0\x9f\x98\x80 \xed\xa0\x80 end"
    octal = "".join(f"\\{b:03o}" for b in raw)
    assert sandbox.exec(f"printf '{octal}'").output == raw.decode("utf-8", "replace")


def test_the_cap_keeps_exactly_the_first_and_last_halves(base_layer: Path, work_root: str):
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root, max_output_bytes=1000)) as sb:
        full = "".join(f"{i}\n" for i in range(1, 2001))
        r = sb.exec("seq 1 2000")
        cut = len(full) - 1000
        assert r.truncated and r.output == full[:500] + f"\n[... {cut} bytes of output cut ...]\n" + full[-500:]
        exact = sb.exec("head -c 1000 /dev/zero | tr '\\0' x")  # at the cap: whole
        assert not exact.truncated and exact.output == "x" * 1000
        over = sb.exec("head -c 1001 /dev/zero | tr '\\0' x")
        assert over.truncated and over.output == "x" * 500 + "\n[... 1 bytes of output cut ...]\n" + "x" * 500


def test_output_without_a_final_newline_and_a_marker_split_across_reads(sandbox: Sandbox):
    assert sandbox.exec("printf abc").output == "abc"
    # 70,000 bytes: the shell's writes end mid-pipe-buffer, so the marker line arrives split from the output
    r = sandbox.exec("head -c 70000 /dev/zero | tr '\\0' y; printf tail")
    assert r.exit_code == 0 and r.output == "y" * 70000 + "tail"


def test_requests_other_than_exec_are_refused_and_the_session_goes_on(sandbox: Sandbox):
    sandbox.exec("true")
    protocol.send(sandbox._live_shell()._live(), {"op": "nope", "nested": {"x": [1, 2]}, "n": 1.5})
    with pytest.raises(protocol.ProtocolError):  # not a flat object: the supervisor hangs up, like on garbage
        protocol.recv(sandbox._live_shell()._live())
    r = sandbox.exec("echo again")  # a new session on the same files
    assert "session died" in r.output and sandbox.exec("echo again").output == "again\n"
    protocol.send(sandbox._live_shell()._live(), {"op": "nope", "flag": True, "none": None})
    assert protocol.recv(sandbox._live_shell()._live())[0] == {"error": "unknown request 'nope'"}
    assert sandbox.exec("echo still").output == "still\n"


def test_an_idle_session_holds_no_python(sandbox: Sandbox):
    pid = sandbox._live_shell().pid  # the session's pid 1 (sandbox.pid is nsinit)
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    assert "libpython" not in maps and "python3" not in maps
    with open(f"/proc/{pid}/comm") as f:
        assert f.read().strip() == "supervisor"


# -- building and caching ------------------------------------------------------------------------------------
@pytest.fixture
def bin_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    monkeypatch.setenv("SWEBOX_BIN_CACHE", str(folder))
    native.session_binary.cache_clear()
    yield folder
    native.session_binary.cache_clear()


def test_the_binary_is_built_once_and_named_by_its_source(bin_cache: Path):
    path = native.session_binary()
    assert os.path.dirname(path) == str(bin_cache) and os.access(path, os.X_OK)
    assert stat.S_IMODE(os.stat(bin_cache).st_mode) == 0o711
    built = os.stat(path).st_mtime_ns
    native.session_binary.cache_clear()
    assert native.session_binary() == path and os.stat(path).st_mtime_ns == built
    assert os.listdir(bin_cache) == [os.path.basename(path)]


def test_the_sources_build_without_a_warning(tmp_path: Path):
    import subprocess

    sources = sorted(str(p) for p in native.SOURCES.glob("*.c"))
    r = subprocess.run(
        [native.compiler(), *native.FLAGS, "-Werror", "-o", str(tmp_path / "session"), *sources],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_a_folder_others_can_write_is_refused(bin_cache: Path):
    bin_cache.mkdir(mode=0o777)
    os.chmod(bin_cache, 0o777)
    with pytest.raises(SandboxError, match="only it can write.*SWEBOX_BIN_CACHE"):
        native.session_binary()


def test_no_compiler_is_a_clear_error(bin_cache: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(bin_cache))
    with pytest.raises(SandboxError, match="C compiler.*apt-get install gcc"):
        native.session_binary()


def test_a_failed_build_says_why_and_leaves_nothing(bin_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    broken = tmp_path / "broken-cc"
    broken.write_text("#!/bin/sh\necho 'this compiler is broken' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    with pytest.raises(SandboxError, match="(?s)failed:.*this compiler is broken"):
        native.session_binary()
    assert os.listdir(bin_cache) == []


# -- the starter ---------------------------------------------------------------------------------------------
def _as_user_with_nproc(uid: int, nproc: int):
    """A preexec_fn: become `uid` with a process limit of `nproc`, then root of a user namespace of its own (the
    limit is still counted for `uid` on the host), as nsinit is when the sandbox's process limit is full."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def become() -> None:
        import resource

        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: a changed uid made /proc/self/*_map root's
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if libc.unshare(0x10000000):  # CLONE_NEWUSER
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {uid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)

    return become


def test_the_starter_waits_while_the_process_limit_is_full(tmp_path: Path):
    # a killed session's processes count against the sandbox's process limit until they are reaped: a reset right
    # after a fork bomb finds the limit full for a moment, and must wait for it rather than fail
    import socket
    import subprocess
    import threading
    import time

    # an id no sandbox uses (their host ids start at SandboxPolicy.host_uid), and no other run of this test on the
    # machine (another checkout's suite): the process limit counts every process of the uid
    uid = 40000 + os.getpid() % 50000
    hog = subprocess.Popen(["sleep", "1"], user=uid, group=uid)  # with the starter: the limit of 2 is full
    reaper = threading.Thread(target=hog.wait)  # reaped as it exits: a zombie would still count
    reaper.start()
    host_end, session_end = socket.socketpair()
    pid_r, pid_w = os.pipe()
    started = time.monotonic()
    starter = subprocess.Popen(
        [
            native.session_binary(),
            "--socket",
            str(session_end.fileno()),
            "--pid-pipe",
            str(pid_w),
            "--root",
            str(tmp_path),
            "--dev",
            str(tmp_path),
        ],
        pass_fds=(session_end.fileno(), pid_w),
        preexec_fn=_as_user_with_nproc(uid, 2),
    )
    session_end.close()
    os.close(pid_w)
    try:
        with os.fdopen(pid_r, "rb") as f:
            pid = int(f.read() or 0)
        waited = time.monotonic() - started
        assert starter.wait(timeout=30) == 0 and pid > 0
        reaper.join(timeout=30)  # the hog's exit status is set by the reaper thread just after the kernel reaps it
        assert hog.returncode == 0 and waited >= 0.5, waited  # it forked pid 1 only once the hog had exited
    finally:
        host_end.close()  # EOF: pid 1 exits before its setup
        reaper.join()


def test_a_starter_that_starts_no_session_is_a_clear_error(
    base_layer: Path, work_root: str, monkeypatch: pytest.MonkeyPatch
):
    # a session command line the starter cannot use: it exits at once, before pid 1 exists, without a word
    from swebox.envs.sandbox import nsinit_args

    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as warm:  # the zygote and lazily-made folders
        warm.exec("true")
    fds = sorted(os.listdir("/proc/self/fd"))
    real = nsinit_args._session
    monkeypatch.setattr(nsinit_args, "_session", lambda *args: [*real(*args), "--no-such-option"])
    with pytest.raises(SandboxError, match="did not start: the session program exited without starting a session"):
        Sandbox([base_layer], SandboxPolicy(work_root=work_root)).start()
    # the start failed after nsinit, its sockets and its folder existed: all of them are gone again
    assert [name for name in os.listdir(work_root) if not name.startswith(".")] == []
    assert sorted(os.listdir("/proc/self/fd")) == fds
