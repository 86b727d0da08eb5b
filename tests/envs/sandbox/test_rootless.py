"""Rootless is a first-class mode: the same API as an unprivileged user (unprivileged user namespaces).

As root, the test creates a throwaway user and runs a script as that user with the system Python and only the
sandbox package on its path (the sandbox needs nothing beyond the standard library).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

SANDBOX_PACKAGE = Path(__file__).resolve().parents[3] / "envs" / "sandbox"
USER = "swebox-rootless-test"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from swebox.envs.sandbox import Sandbox, SandboxPolicy
    root = sys.argv[1]
    out = {}
    policy = SandboxPolicy(work_root=root + "/work", max_processes=48, memory_mb=512)
    with Sandbox([root + "/layer"], policy) as sb:
        out["backend"] = sb.backend
        out["limits"] = sb.limits_in_force()
        out["id"] = sb.exec("id -u; cat /proc/self/uid_map").output.split()
        out["read"] = sb.exec("cat /testbed/a").output
        out["write"] = sb.exec("echo x > /testbed/b && cat /testbed/b").output
        sb.write_file("/testbed/c", "from host")
        out["host_read"] = sb.read_file("/testbed/b").decode()
        out["shadow"] = sb.exec("cat /etc/shadow; echo rc=$?").output
        out["mount"] = sb.exec("mount -t tmpfs x /testbed; echo rc=$?").output
        out["caps"] = sb.exec("grep CapEff /proc/self/status").output
        child = sb.fork()
        out["fork"] = child.exec("ls /testbed").output
        child.close()
        sb.exec("(:(){ :|:& };:) >/dev/null 2>&1 & sleep 2", timeout=30)
        out["bomb"] = sum(1 for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/status")
                          and f"Uid:\t{os.getuid()}\t" in open(f"/proc/{p}/status").read())
        sb.reset()
        out["reset"] = sb.exec("ls /testbed").output
    out["left"] = [f for _, _, files in os.walk(root + "/work") for f in files]
    print(json.dumps(out))
""")


@pytest.fixture
def throwaway_user():
    if os.geteuid() != 0:
        pytest.skip("not root: the rest of the suite already runs rootless")
    if not SYSTEM_PYTHON:
        pytest.skip("no system python3 in /usr/bin")
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        created = True
    entry = pwd.getpwnam(USER)
    yield entry
    if created:
        subprocess.run(["userdel", USER], check=False)


def test_the_api_works_for_an_unprivileged_user(throwaway_user):
    uid, gid = throwaway_user.pw_uid, throwaway_user.pw_gid
    root = tempfile.mkdtemp(prefix="swebox-rootless-", dir="/tmp")
    try:
        os.chmod(root, 0o755)
        package = Path(root, "pkg", "swebox", "envs")
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        os.symlink(SANDBOX_PACKAGE, package / "sandbox")
        Path(root, "layer", "testbed").mkdir(parents=True)
        Path(root, "layer", "testbed", "a").write_text("hello\n")
        Path(root, "work").mkdir()
        Path(root, "run.py").write_text(SCRIPT)
        for path in [Path(root, "layer"), *Path(root, "layer").rglob("*"), Path(root, "work")]:
            os.chown(path, uid, gid)
        r = subprocess.run(
            [
                "runuser",
                "-u",
                USER,
                "--",
                "env",
                f"PYTHONPATH={root}/pkg",
                "PYTHONDONTWRITEBYTECODE=1",
                SYSTEM_PYTHON,
                f"{root}/run.py",
                root,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        import json

        out = json.loads(r.stdout)
        assert out["id"] == ["0", "0", str(uid), "1"]  # uid 0 inside is the user outside, nothing more
        assert out["read"] == "hello\n" and out["write"] == "x\n" and out["host_read"] == "x\n"
        assert "No such file" in out["shadow"] and "rc=1" in out["shadow"]
        assert "rc=0" not in out["mount"]
        assert out["caps"].split()[-1] == "0000000000000000"
        assert out["fork"] == "a\nb\nc\n"
        assert out["bomb"] <= 48 + 8  # the bomb, plus this script, nsinit and the supervisor
        assert out["reset"] == "a\n"
        assert out["limits"]["processes"].startswith("rlimit")
        # the documented limit: rootless sandboxes share the user's per-user budgets (one id, no id block)
        assert out["limits"]["kernel_budgets"].startswith(f"shared: rootless, every sandbox of uid {uid} "), out
        assert out["left"] == []
    finally:
        shutil.rmtree(root, ignore_errors=True)
