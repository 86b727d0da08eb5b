"""Images rootless, as a real unprivileged user (made with useradd, removed after): the library converts and
runs an image; ``swebox cache pull`` run by that user into a store of its own packs every file as the user's,
so its sandbox (squashfuse lowers) can write the image's files; a layer packed by root is refused by that
user's cache with how to fix it, and a pull into a store the user cannot write says so before anything."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .oci_fixture import build_test_image

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("tar2sqfs", "squashfuse", "useradd")) or os.geteuid() != 0,
    reason="needs root (to make the user), tar2sqfs and squashfuse (apt-get install squashfs-tools-ng squashfuse)",
)
USER = "swebox-rootless-img"
REPO = Path(__file__).resolve().parents[3]

RUN_SCRIPT = """
import json, os, sys
from swebox.envs.cache import LayerCache, LayerCacheConfig, LayerStore
from swebox.envs.cache.images import acquire_image, import_image, oci_layout
from swebox.envs.sandbox import Sandbox
root, store_dir, convert = sys.argv[1], sys.argv[2], sys.argv[3] == "convert"
store = LayerStore(store_dir)  # as this user: packed files are this user's, the only uid it maps
if convert:
    import_image(store, oci_layout(root + "/layout"), "img", "linux/amd64")
cache = LayerCache(store, LayerCacheConfig(root=root + "/node"))
try:
    with acquire_image(cache, "img") as held, Sandbox(held.paths, held.policy) as sb:
        out = sb.exec("id -u; pwd; echo $FROM_BASHRC; cat /data/linked.txt; ls /opt /etc/conf.d; "
                      "stat -c %u /data/linked.txt; echo new > /data/new.txt && cat /data/new.txt; "
                      "echo more >> /data/linked.txt && cat /data/linked.txt").output
except PermissionError as e:
    out = f"{type(e).__name__}: {e}"
finally:
    cache.close()
print(json.dumps(out))
"""
SANDBOX_VIEW = [
    "0",
    "/data",
    "activated",
    "the hard link's target",
    "/etc/conf.d:",
    "c.conf",
    "",
    "/opt:",
    "0",
    "new",
    "the hard link's target",
    "more",
]
"""What the sandbox shows of the test image: the image's files are its root's, and writable."""


@pytest.fixture
def rootless(tmp_path):
    """(run as the user: argv -> CompletedProcess, folder the user owns with the image layout in it)."""
    python = shutil.which("python3", path="/usr/bin:/bin")  # the user cannot read root's own interpreters
    try:
        user, created = pwd.getpwnam(USER), False
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        user, created = pwd.getpwnam(USER), True
    root = Path(tempfile.mkdtemp(prefix="swebox-rootless-img-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        package = root / "pkg" / "swebox"  # the checkout as a package the user can import
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        for name in ("envs", "scripts", "trainers"):
            os.symlink(REPO / name, package / name)
        build_test_image(root / "layout")
        (root / "run.py").write_text(RUN_SCRIPT)
        for path in [root, *(p for p in root.rglob("*") if p.parent.name != "swebox")]:
            os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
        fuse = root / "fuse"  # the container's /dev/fuse is not the user's: a node of its own, bound over it
        os.mknod(fuse, 0o666 | 0o020000, os.stat("/dev/fuse").st_rdev)
        os.chmod(fuse, 0o666)

        def run(*argv: str) -> subprocess.CompletedProcess:
            as_user = " ".join(
                [
                    "setpriv",
                    f"--reuid={user.pw_uid}",
                    f"--regid={user.pw_gid}",
                    "--clear-groups",
                    "env",
                    "-i",
                    "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                    f"HOME={root}",
                    f"PYTHONPATH={root}/pkg",
                    "PYTHONDONTWRITEBYTECODE=1",
                    f"SWEBOX_WORK_ROOT={root}/work",
                    python,
                    *argv,
                ]
            )
            return subprocess.run(
                [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    f"mount --bind {fuse} /dev/fuse && {as_user}",
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )

        yield run, root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if created:
            subprocess.run(["userdel", "--force", USER], check=False, capture_output=True)


def _view(r: subprocess.CompletedProcess) -> list[str] | str:
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out if out.startswith(("PermissionError", "LayerOwnerError")) else out.splitlines()


def test_rootless_user_converts_and_runs_an_image(rootless):
    run, root = rootless
    assert _view(run(f"{root}/run.py", str(root), f"{root}/store", "convert")) == SANDBOX_VIEW


def test_rootless_cli_pull_into_the_users_store_runs_and_a_roots_store_is_refused_clearly(rootless):
    from swebox.envs.cache import LayerStore

    from .test_cli import swebox

    run, root = rootless
    cli = ("-m", "swebox.scripts.cli", "cache")
    pulled = run(*cli, "--store", f"{root}/store", "pull", f"oci:{root}/layout:latest", "--as", "img")
    assert pulled.returncode == 0 and "img: 3 layers" in pulled.stdout, pulled.stdout + pulled.stderr
    uid = pwd.getpwnam(USER).pw_uid
    assert {LayerStore(root / "store").get(k).meta["owner"] for k in _image_layers(root / "store")} == {uid}
    assert _view(run(f"{root}/run.py", str(root), f"{root}/store", "use")) == SANDBOX_VIEW

    # root's store: its layers are packed for root's sandboxes (uid 100000), which this user cannot map
    assert swebox("cache", "--store", str(root / "rootstore"), "pull", f"oci:{root}/layout:latest", "--as", "img") == 0
    refused = _view(run(f"{root}/run.py", str(root), f"{root}/rootstore", "use"))
    assert refused.startswith("LayerOwnerError: layer oci-") and f"expected files owned by uid {uid}" in refused
    assert "packed for uid 100000" in refused and "pull or build it again as this user" in refused.lower()
    denied = run(*cli, "--store", f"{root}/rootstore", "pull", f"oci:{root}/layout:latest", "--as", "other")
    assert denied.returncode == 2 and f"uid {uid}) cannot write the layer store" in denied.stderr, denied.stderr
    assert "owned by uid 0" in denied.stderr and not (root / "rootstore" / "images" / "other.json").exists()


def _image_layers(store: Path) -> list[str]:
    record = json.loads((store / "images" / "img.json").read_text())
    return record["layers"]
