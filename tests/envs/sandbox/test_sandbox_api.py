"""The Sandbox API against real namespaces and real overlay mounts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swebox.envs.sandbox import Layer, Sandbox, SandboxError, SandboxPolicy
from swebox.envs.sandbox.layers import write_record


def test_layers_form_the_root_and_the_shell_keeps_state(sandbox: Sandbox):
    r = sandbox.exec("cat /testbed/README && id -u && hostname")
    assert (r.output, r.exit_code, r.timed_out, r.truncated) == ("base\n0\nsandbox\n", 0, False, False)
    assert r.duration_s > 0
    sandbox.exec("cd /testbed/pkg && export GREETING=hello")
    assert sandbox.exec("pwd; echo $GREETING").output == "/testbed/pkg\nhello\n"
    r = sandbox.exec("echo out; echo err >&2; exit_code_test() { return 7; }; exit_code_test")
    assert r.output == "out\nerr\n" and r.exit_code == 7


def test_upper_layers_shadow_lower_ones_including_deletions(base_layer: Path, task_layer: Path, work_root: str):
    with Sandbox([base_layer, task_layer], SandboxPolicy(work_root=work_root)) as sb:
        r = sb.exec("cat /testbed/pkg/__init__.py /testbed/NEW; ls /testbed")
        assert r.output == "VALUE = 2\nnew\nNEW\nREADME\npkg\n"
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root)) as sb:  # the base is untouched
        assert sb.exec("cat /testbed/pkg/__init__.py").output == "VALUE = 1\n"


def test_stdin_is_empty_and_syntax_errors_do_not_wedge_the_shell(sandbox: Sandbox):
    assert sandbox.exec("cat; read x; echo read=$?").output == "read=1\n"
    r = sandbox.exec('echo "unterminated')
    assert r.exit_code == 2 and "unexpected EOF" in r.output
    assert sandbox.exec("echo fine").output == "fine\n"


def test_timeout_kills_the_command_and_keeps_the_shell(sandbox: Sandbox):
    sandbox.exec("cd /testbed && export KEEP=1")
    r = sandbox.exec("sleep 100 & sleep 200", timeout=1)
    assert r.timed_out and r.exit_code is None and "timed out" in r.output
    assert r.duration_s < 100  # the timeout ended it, not the end of `sleep 100`
    out = sandbox.exec('echo "state: $(pwd) $KEEP $(pgrep -c sleep)"').output  # after bash's note of a killed job
    assert [line for line in out.splitlines() if line.startswith("state:")] == ["state: /testbed 1 0"], out


def test_a_timeout_spares_what_earlier_commands_left_running(sandbox: Sandbox):
    # the supervisor lists the session's processes before each command; a timeout kills only those made after
    def sleeping() -> list[str]:  # bash may first report the killed job ("... Killed sleep 100"): not a pid
        out = sandbox.exec("echo pids: $(pgrep sleep)").output
        return next(line for line in out.splitlines() if line.startswith("pids:")).split()[1:]

    sandbox.exec("sleep 300 >/dev/null 2>&1 &")  # a server an earlier command started
    # the shell returns once it has forked it; it is a bash until its exec of sleep, which can come later
    deadline = time.monotonic() + 60
    while len(survivor := sleeping()) != 1:
        assert time.monotonic() < deadline, f"the background sleep never ran: {survivor}"
        time.sleep(0.05)
    for _ in range(2):  # the listing is made anew for each command
        assert sandbox.exec("sleep 100 & sleep 200", timeout=1).timed_out
        assert sleeping() == survivor
    sandbox.exec("pkill sleep")


def test_a_stuck_builtin_loop_replaces_the_shell_on_the_same_files(sandbox: Sandbox):
    sandbox.exec("cd /testbed && echo kept > file")
    r = sandbox.exec("while true; do :; done", timeout=1)
    assert r.timed_out and "new shell was started" in r.output and "/testbed" in r.output
    assert sandbox.exec("cat /testbed/file").output == "kept\n"


@pytest.mark.parametrize("command", ["exit 3", "kill -9 $$"])
def test_shell_death_is_reported_and_the_shell_restarts(sandbox: Sandbox, command: str):
    sandbox.exec("echo kept > /testbed/file")
    r = sandbox.exec(command)
    assert "the shell exited" in r.output and r.exit_code in (3, -9)
    assert sandbox.exec("cat /testbed/file").output == "kept\n"


def test_output_is_capped_keeping_head_and_tail(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root, max_output_bytes=1000)
    with Sandbox([base_layer], policy) as sb:
        r = sb.exec("echo FIRST; seq 1 100000; echo LAST")
        assert r.truncated and r.exit_code == 0
        assert r.output.startswith("FIRST\n1\n") and r.output.endswith("100000\nLAST\n")
        assert "bytes of output cut" in r.output and len(r.output) < 1200
        r = sb.exec("yes", timeout=1)
        assert r.timed_out and r.truncated and len(r.output) < 1300
        r = sb.exec(r"printf 'ok \xff\xfe end\n'")
        assert r.output == "ok \ufffd\ufffd end\n"


def test_reset_restores_the_layers_and_kills_everything(sandbox: Sandbox):
    sandbox.exec("cd /testbed && echo x > new && rm README && echo y >> pkg/__init__.py && mkdir d")
    sandbox.exec("echo t > /tmp/t; nohup sleep 1000 >/dev/null 2>&1 &")
    deadline = time.monotonic() + 60  # a bash, then nohup, until its exec of sleep, which can come later
    while "sleep" not in sandbox.exec("ps -eo comm").output.split():
        assert time.monotonic() < deadline, "the background sleep never ran"
        time.sleep(0.05)
    sandbox.reset()
    r = sandbox.exec("ls /testbed; cat /testbed/pkg/__init__.py; ls /tmp; ps -eo comm --no-headers")
    assert r.output == "README\ngone.txt\npkg\nVALUE = 1\nbash\nps\n" or r.output.startswith(
        "README\ngone.txt\npkg\nVALUE = 1\n"
    )
    assert "sleep" not in r.output
    assert sandbox.exec("pwd").output == "/\n"


def test_snapshot_and_fork_capture_runtime_state(sandbox: Sandbox):
    sandbox.exec("cd /testbed && echo prepared > setup.txt && rm gone.txt && mkdir -p deep/er && echo z > deep/er/z")
    child = sandbox.fork()
    try:
        assert child.exec("cat /testbed/setup.txt /testbed/deep/er/z; ls /testbed").output == (
            "prepared\nz\nREADME\ndeep\npkg\nsetup.txt\n"
        )
        child.exec("echo only-in-child > /testbed/c")
        sandbox.exec("echo only-in-parent > /testbed/p")
        assert child.exec("ls /testbed/p").exit_code != 0
        assert sandbox.exec("ls /testbed/c").exit_code != 0
        child.reset()  # a fork resets to the snapshot, not to the parent's layers
        assert child.exec("cat /testbed/setup.txt; ls /testbed/c").output.startswith("prepared\n")
    finally:
        child.close()


def test_snapshot_layers_are_removed_when_unused(sandbox: Sandbox):
    snap = sandbox.snapshot()
    path = snap.path
    assert path.is_dir()
    child = Sandbox([*sandbox.layers, snap], sandbox.policy).start()
    child.close()
    assert not path.exists()
    kept = sandbox.snapshot().persist()
    child = Sandbox([*sandbox.layers, kept], sandbox.policy).start()
    child.close()
    assert kept.path.is_dir()


def test_host_side_file_helpers(sandbox: Sandbox):
    assert sandbox.read_file("/testbed/README") == b"base\n"
    sandbox.write_file("/testbed/pkg/mod.py", "X = 'é'\n")
    r = sandbox.exec("cd /testbed && python3 -c 'import pkg.mod; print(pkg.mod.X)' && stat -c %u pkg/mod.py")
    assert r.output == "é\n0\n"
    sandbox.exec("echo data > /testbed/made_inside")
    assert sandbox.read_file("/testbed/made_inside") == b"data\n"
    with pytest.raises(SandboxError, match="no such file"):
        sandbox.read_file("/testbed/missing")
    with pytest.raises(SandboxError, match="folder does not exist"):
        sandbox.write_file("/nowhere/x", b"")


def test_virtualenv_interpreters_are_bound_read_only(tmp_path: Path, work_root: str):
    layer = tmp_path / "venvlayer"
    layer.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(layer / "venv")], check=True)
    home = Path(sys.base_prefix)
    assert Layer(layer).interpreters == ()  # the venv's pyvenv.cfg is never read for it
    write_record(layer, [str(home)])  # the layer's maker declares it (the env builder, in its manifest)
    assert Layer(layer).interpreters == (str(home),)
    with Sandbox([layer], SandboxPolicy(work_root=work_root)) as sb:
        r = sb.exec(f"ls -d {home}/bin/python3 && touch {home}/x")
        assert str(home) in r.output and "Read-only file system" in r.output
        # the venv's own path differs (it was made on the host at another path), its interpreter runs
        r = sb.exec(f"{home}/bin/python3 -c 'import sys; print(sys.version_info[0])'")
        assert r.output == "3\n"
        assert sb.exec("ls /root/.ssh /home 2>&1; ls /").exit_code == 0


def test_errors_are_clear(base_layer: Path, work_root: str, tmp_path: Path):
    with pytest.raises(SandboxError, match="expected a directory"):
        Sandbox([tmp_path / "missing"], SandboxPolicy(work_root=work_root)).start()
    with pytest.raises(SandboxError, match="expected a list"):
        Sandbox(base_layer)
    sb = Sandbox([base_layer], SandboxPolicy(work_root=work_root)).start()
    sb.close()
    sb.close()  # idempotent
    for call in (lambda: sb.exec("true"), sb.reset, sb.snapshot, lambda: sb.read_file("/x")):
        with pytest.raises(SandboxError, match="closed sandbox"):
            call()
    assert os.listdir(work_root) == []


def test_methods_start_a_new_sandbox_lazily(base_layer: Path, work_root: str):
    sb = Sandbox([base_layer], SandboxPolicy(work_root=work_root))
    try:
        assert sb.exec("echo lazy").output == "lazy\n"
    finally:
        sb.close()


def test_limits_in_force_say_what_enforces_each_limit(sandbox: Sandbox):
    limits = sandbox.limits_in_force()
    assert set(limits) >= {"memory", "processes", "cpu_seconds", "file_size", "disk", "wall_clock"}
    if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/memory"):
        assert limits["memory"].startswith("cgroup")


@pytest.mark.parametrize("backend", ["extract", "fuse-overlayfs"])
def test_other_backends_behave_the_same(base_layer: Path, task_layer: Path, work_root: str, backend: str):
    from swebox.envs.sandbox.probe import fuse_overlayfs_available

    if backend == "fuse-overlayfs" and not fuse_overlayfs_available():
        pytest.skip("fuse-overlayfs needs the program and a mode-0666 /dev/fuse (see test_fuse_backend_*)")
    root_type = "awk '$5 == \"/\" { for (i = 1; i < NF; i++) if ($i == \"-\") print $(i + 1) }' /proc/self/mountinfo"
    expected_type = {"extract": "tmpfs\n", "fuse-overlayfs": "fuse.fuse-overlayfs\n"}[backend]
    with Sandbox([base_layer, task_layer], SandboxPolicy(work_root=work_root, backend=backend)) as sb:
        assert sb.backend == backend and sb.exec(root_type).output == expected_type
        assert sb.exec("cat /testbed/pkg/__init__.py; ls /testbed").output == "VALUE = 2\nNEW\nREADME\npkg\n"
        sb.exec("rm -r /testbed/pkg; echo x > /testbed/y")
        sb.reset()
        assert sb.exec("ls /testbed").output == "NEW\nREADME\npkg\n" and sb.exec(root_type).output == expected_type
        sb.exec("echo forked > /testbed/f")
        child = sb.fork()
        try:
            assert child.exec("cat /testbed/f /testbed/pkg/__init__.py").output == "forked\nVALUE = 2\n"
        finally:
            child.close()


def test_host_side_writes_see_what_the_shell_sees(sandbox: Sandbox):
    with pytest.raises(SandboxError, match="read-only"):
        sandbox.write_file("/usr/evil.py", b"x")
    assert not os.path.exists("/usr/evil.py")
    sandbox.write_file("/tmp/note", b"in the private /tmp")
    assert sandbox.exec("cat /tmp/note").output == "in the private /tmp"
    assert sandbox.read_file("/tmp/note") == b"in the private /tmp"


def test_files_are_readable_the_moment_start_returns(base_layer: Path, work_root: str):
    """The host must never reach files through a supervisor that has not pivoted into the sandbox yet."""
    policy = SandboxPolicy(work_root=work_root)
    for _ in range(20):
        with Sandbox([base_layer], policy) as sb:
            assert sb.read_file("/testbed/README") == b"base\n"
            sb.reset()
            assert sb.read_file("/testbed/README") == b"base\n"


def test_read_only_binds_below_tmp_are_visible(base_layer: Path, work_root: str):
    """A checkout (and its venv) under /tmp stays visible over the sandbox's private /tmp."""
    folder = Path(work_root) / "bound"
    folder.mkdir()
    (folder / "marker").write_text("bound from the host\n")
    os.chmod(folder, 0o755)
    os.chmod(folder / "marker", 0o644)
    with Sandbox([base_layer], SandboxPolicy(work_root=work_root, ro_binds=(str(folder),))) as sb:
        r = sb.exec(f"cat {folder}/marker; touch {folder}/x; echo private > /tmp/own; cat /tmp/own")
        assert r.output.startswith("bound from the host\n") and "Read-only" in r.output
        assert r.output.endswith("private\n")
