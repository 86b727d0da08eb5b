"""The extract (paper-style) backend survives many resets of a layer with thousands of files, and leaves nothing.

It is the baseline of every benchmark: it once failed after about nine resets of a 200 MB environment (`cp -r
... returned non-zero exit status 1`). Each reset here happens while the old session still has a process
writing into the tree.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxPolicy

FILES = 3000
RESETS = 15
# a writer that outlives the command (setsid + nohup), creating files and folders as fast as it can
WRITER = (
    "setsid nohup sh -c 'i=0; while :; do i=$((i+1)); mkdir -p /testbed/d0/w$i; echo $i > /testbed/d0/w$i/f;"
    " done' >/dev/null 2>&1 &"
)
# until the writer is under way (a fixed 0.2 s was not always enough on a loaded machine for setsid, nohup and sh
# to start and the first mkdir to land: the count below was then 0); at most 60 s
WRITING = "for t in $(seq 1200); do [ -s /testbed/d0/w2/f ] && break; sleep 0.05; done"


@pytest.fixture
def many_files(tmp_path: Path) -> Path:
    """A layer with FILES files in 30 folders, a read-only folder, a read-only file and a link."""
    layer = tmp_path / "many"
    for i in range(FILES):
        folder = layer / "testbed" / f"d{i % 30}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{i}.py").write_text(f"VALUE = {i}\n" * 20)
    (layer / "testbed" / "locked").mkdir()
    (layer / "testbed" / "locked" / "ro.txt").write_text("read-only\n")
    os.symlink("d0/m0.py", layer / "testbed" / "link.py")
    for path in (tmp_path, layer, *layer.rglob("*")):
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(layer / "testbed" / "locked" / "ro.txt", 0o444)
    os.chmod(layer / "testbed" / "locked", 0o555)
    return layer


def _disk_bytes(folder: str) -> int:
    return int(
        subprocess.run(["du", "-s", "-B1", "-x", folder], capture_output=True, text=True, check=True).stdout.split()[0]
    )


LISTING = "find /testbed | wc -l; cat /testbed/link.py | head -1; ls /testbed/d0 | grep -c ^w"


@pytest.mark.e2e
def test_fifteen_resets_of_thousands_of_files_restore_the_layer_and_leave_nothing(many_files: Path, work_root: str):
    entries = FILES + 30 + 4  # files, their folders, /testbed, locked/, locked/ro.txt, link.py
    pristine = f"{entries}\nVALUE = 0\n0\n"
    with Sandbox([many_files], SandboxPolicy(work_root=work_root, backend="extract")) as sb:
        assert sb.exec(LISTING).output == pristine
        folder = os.path.join(work_root, os.listdir(work_root)[0])
        for rep in range(RESETS):
            r = sb.exec(
                f"rm -r /testbed/d1 && chmod 000 /testbed/d2 && chmod -R u+w /testbed/locked && "
                f"echo agent > /testbed/locked/ro.txt && {WRITER} {WRITING}; ls /testbed/d0 | grep -c ^w"
            )
            assert r.exit_code == 0 and int(r.output) > 0, r.output
            sb.reset()
            assert sb.exec(LISTING).output == pristine, f"reset {rep}"
            assert (
                sb.exec("cat /testbed/locked/ro.txt; stat -c %a /testbed/d2 /testbed/locked").output
                == "read-only\n755\n555\n"
            )
            # the private copy lives in a tmpfs of the sandbox's: nothing of it accumulates on disk
            assert _disk_bytes(folder) < 1 << 20, _disk_bytes(folder)
        child = sb.fork()  # a snapshot copies the current private copy
        try:
            assert child.exec(LISTING).output == pristine
        finally:
            child.close()
    assert [name for name in os.listdir(work_root) if name != "snapshots" and not name.startswith(".")] == []


def test_an_archive_that_does_not_unpack_fails_the_start_with_tars_words(
    base_layer: Path, work_root: str, tmp_path: Path
):
    from swebox.envs.sandbox import Layer, SandboxError

    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"this is not gzip data\n" * 10)
    layer = Layer(base_layer, archive=broken)
    with pytest.raises(
        SandboxError,
        match=r"did not start: the copy of the layers failed: RuntimeError: tar -xzf "
        r"\.\.\. exited with 2: .*gzip",
    ):
        Sandbox([layer], SandboxPolicy(work_root=work_root, backend="extract")).start()
    assert [name for name in os.listdir(work_root) if not name.startswith(".")] == []


def test_a_reset_that_cannot_restore_fails_and_the_next_one_recovers(base_layer: Path, work_root: str, tmp_path: Path):
    import tarfile

    from swebox.envs.sandbox import Layer, SandboxError

    archive = tmp_path / "base.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(base_layer, arcname=".")
    good = archive.read_bytes()
    with Sandbox([Layer(base_layer, archive=archive)], SandboxPolicy(work_root=work_root, backend="extract")) as sb:
        sb.exec("echo agent > /testbed/README")
        with open(archive, "r+b") as f:  # the same file (nsinit reopens it through its fd), now not gzip
            f.write(b"\0" * 64)
        with pytest.raises(SandboxError, match="reset failed: the copy of the layers failed: RuntimeError: tar"):
            sb.reset()
        with open(archive, "r+b") as f:
            f.write(good)
        sb.reset()  # the failed restore left nothing mounted in the way
        assert sb.exec("cat /testbed/README").output == "base\n"
