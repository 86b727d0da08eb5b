"""``swebox doctor``: one line per check, a real sandbox started, and the exit status says whether a check failed.
A failing check (no git on PATH, user namespaces reported off) gives FAIL with its fix and exit 1."""

from __future__ import annotations

import subprocess
import sys

import pytest
from swebox.scripts import doctor

EXPECTED = [
    "user namespaces",
    "sandbox",
    "copy-on-write",
    "cgroups",
    "squashfs tools",
    "git",
    "python interpreters",
    "ray",
    "disk",
]


def run(env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swebox.scripts.cli", "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def test_doctor_checks_this_machine_one_line_each(tmp_path, private_tmp):
    import os

    done = run({**os.environ, "TMPDIR": private_tmp}, cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert [line.split(":")[0][6:] for line in lines[:-1]] == EXPECTED, done.stdout
    assert all(line[:6].strip() in ("ok", "warn", "FAIL") for line in lines[:-1])
    # this machine runs the suite's sandboxes: the sandbox check must pass (it starts a real one)
    assert lines[1].startswith("ok    sandbox: started, ran a command and stopped (backend "), done.stdout
    failed = [line for line in lines[:-1] if line.startswith("FAIL")]
    assert done.returncode == (1 if failed else 0) and lines[-1].endswith(
        f"{len(failed)} failed" + (": " + ", ".join(f.split(":")[0][6:] for f in failed) if failed else "")
    )
    assert "Traceback" not in done.stderr
    assert not [p for p in os.listdir(private_tmp) if p.startswith("swebox-doctor-")]

    # git off PATH: FAIL with the fix, exit 1
    no_git = tmp_path / "bin"
    no_git.mkdir()
    for tool in ("cc", "gcc", "mksquashfs", "squashfuse"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found:
            (no_git / tool).symlink_to(found)
    done = run({**os.environ, "PATH": str(no_git)}, cwd=tmp_path)
    git_line = next(line for line in done.stdout.splitlines() if line[6:].startswith("git:"))
    assert git_line.startswith("FAIL  git: not on PATH") and "fix: apt-get install git" in git_line
    last = done.stdout.splitlines()[-1]
    assert done.returncode == 1 and "failed: " in last and "git" in last.split("failed: ")[1].split(", "), last


@pytest.fixture
def private_tmp():
    """A temporary folder of this test's own for the doctor's TMPDIR: the machine's /tmp is shared with other
    test workers, one of which may be running `swebox doctor` (test_documented_commands_run) while this test
    looks for folders the doctor left behind. Reachable by a sandbox's unprivileged ids, like the /tmp it stands for."""
    import os
    import shutil
    import tempfile

    root = tempfile.mkdtemp(prefix="swebox-test-doctortmp-")
    os.chmod(root, 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_namespaces_off_is_a_failure_with_its_fix_and_skips_the_sandbox(monkeypatch, capsys):
    from swebox.envs.sandbox.policy import SandboxError

    def off(rootless: bool) -> None:
        raise SandboxError(
            "user namespaces are disabled (/proc/sys/user/max_user_namespaces = 0); "
            "enable them with `sysctl -w user.max_user_namespaces=15000`"
        )

    monkeypatch.setattr("swebox.envs.sandbox.probe.check_user_namespaces", off)
    assert doctor.run_cli(None) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "FAIL  user namespaces: user namespaces are disabled (/proc/sys/user/max_user_namespaces = 0);"
        " fix: enable them with `sysctl -w user.max_user_namespaces=15000`"
    )
    assert lines[1] == "FAIL  sandbox: not tried: user namespaces are off; fix: fix the line above"
    assert lines[-1].split("failed: ")[1].split(", ")[:2] == ["user namespaces", "sandbox"], lines[-1]
