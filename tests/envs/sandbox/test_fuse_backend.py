"""fuse-overlayfs, on hosts whose /dev/fuse is root-only: run the backend tests in a private mount namespace
where a mode-0666 node of the same device stands at /dev/fuse (what a default Debian host has)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from swebox.envs.sandbox.probe import fuse_overlayfs_available


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("fuse-overlayfs") or not os.path.exists("/dev/fuse"),
    reason="needs root, fuse-overlayfs and /dev/fuse",
)
@pytest.mark.skipif(fuse_overlayfs_available(), reason="the backend is already tested directly on this host")
def test_fuse_backend_in_a_namespace_with_an_open_dev_fuse():
    with tempfile.TemporaryDirectory() as folder:
        node = os.path.join(folder, "fuse")
        st = os.stat("/dev/fuse")
        os.mknod(node, 0o666 | 0o020000, st.st_rdev)
        os.chmod(node, 0o666)
        test = "tests/envs/sandbox/test_sandbox_api.py::test_other_backends_behave_the_same[fuse-overlayfs]"
        script = f"mount --bind {node} /dev/fuse && exec {sys.executable} -m pytest -q -p no:cacheprovider {test}"
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "1 passed" in r.stdout, r.stdout
