"""Rootless node caches mount squashfs layers with squashfuse, and a rootless sandbox runs on them.

As root, the test packs a layer owned by a throwaway user, then runs the cache and the sandbox as that user with
the system Python (the cache and the sandbox need only the standard library). Hosts whose /dev/fuse is root-only
(this one) get a private mount namespace where a mode-0666 node of the same device stands at /dev/fuse, as on a
default Debian host.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest
from swebox.envs.cache import LayerStore

ENVS = Path(__file__).resolve().parents[3] / "envs"
USER = "swebox-rootless-test"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
    from swebox.envs.sandbox import Sandbox, SandboxPolicy
    root, key = sys.argv[1], sys.argv[2]
    cache = LayerCache(LayerStore(root + "/store"), LayerCacheConfig(root=root + "/node"))
    out = {}
    with cache.acquire(key) as handle:
        with open("/proc/self/mountinfo") as f:
            out["mount"] = [line.split(" - ")[1].split()[0] for line in f if str(handle.path) in line]
        with Sandbox([handle.path], SandboxPolicy(work_root=root + "/work")) as sb:
            out["read"] = sb.exec("cat /testbed/hello; id -u; echo x > /testbed/new && cat /testbed/new").output
    cache.close()
    with open("/proc/self/mountinfo") as f:
        out["left"] = [line for line in f if line.split()[4].startswith(root)]
    print(json.dumps(out))
""")


@pytest.mark.skipif(
    os.geteuid() != 0 or not SYSTEM_PYTHON or not shutil.which("squashfuse"),
    reason="needs root (to create the user), the system python3 and squashfuse",
)
def test_rootless_cache_mounts_squashfs_with_squashfuse(tmp_path):
    try:
        pwd.getpwnam(USER)
        created = False
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        created = True
    user = pwd.getpwnam(USER)
    root = Path(tempfile.mkdtemp(prefix="swebox-rootless-cache-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        package = root / "pkg" / "swebox" / "envs"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        for name in ("sandbox", "cache"):
            os.symlink(ENVS / name, package / name)
        layer = root / "layer"
        (layer / "testbed").mkdir(parents=True)
        (layer / "testbed" / "hello").write_text("from a squashfs layer\n")
        store = LayerStore(root / "store", fmt="squashfs", owner=user.pw_uid)
        with store.lock("env-hello"):
            store.publish("env-hello", layer)
        (root / "run.py").write_text(SCRIPT)
        for folder in ("node", "work"):
            (root / folder).mkdir()
        for path in [root / "store", *(root / "store").rglob("*"), root / "node", root / "work"]:
            os.chown(path, user.pw_uid, user.pw_gid)
        fuse = root / "fuse"
        os.mknod(fuse, 0o666 | 0o020000, os.stat("/dev/fuse").st_rdev)
        os.chmod(fuse, 0o666)
        as_user = (
            f"runuser -u {USER} -- env PYTHONPATH={root}/pkg PYTHONDONTWRITEBYTECODE=1 "
            f"{SYSTEM_PYTHON} {root}/run.py {root} env-hello"
        )
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount --bind {fuse} /dev/fuse && {as_user}"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["mount"] == ["fuse.squashfuse"]
        assert out["read"] == "from a squashfs layer\n0\nx\n"
        assert out["left"] == [], out["left"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if created:
            subprocess.run(["userdel", USER], check=False)
