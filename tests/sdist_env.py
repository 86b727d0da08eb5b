"""Env layers from real PyPI sdists (Django, sympy) for the log-grader tests.

The sdist is downloaded once into ~/.cache/swebox/sdists and unpacked inside a sandbox into /testbed (one git
commit, after the test's edits — the bug — are written), with /venv made from this interpreter and the
project importable through a .pth file, its dependencies installed from wheels (the machine's local wheel
folder, else downloaded once into ~/.cache/swebox/test-wheels): tests/fixture_env.py's build_layer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from swebox.envs.sandbox import Layer, Sandbox

from tests.fixture_env import build_layer, wheels

SDISTS = Path(os.path.expanduser("~/.cache/swebox/sdists"))


def sdist(name: str, version: str) -> Path:
    """The sdist archive of name==version, fetched from the package index on first use."""

    def found() -> list[Path]:
        return sorted({*SDISTS.glob(f"{name}-{version}.tar.gz"), *SDISTS.glob(f"{name.lower()}-{version}.tar.gz")})

    if not found():
        SDISTS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(SDISTS),
                f"{name}=={version}",
            ],
            check=True,
            timeout=600,
        )
        os.chmod(SDISTS, 0o755)
    return found()[0]


def build_sdist_layer(
    archive: Path,
    requirements: list[str],
    edits: dict[str, tuple[str, str]],
    new_files: dict[str, str] | None = None,
    reverse: tuple[str, ...] = (),
) -> Layer:
    """/testbed = the unpacked sdist with ``edits`` (path -> (old text, new text)), ``new_files`` and the diffs
    ``reverse`` taken back (a released fix undone: the state before it), committed."""

    def prepare(sb: Sandbox) -> None:
        unpack = sb.exec(
            f"mkdir -p /testbed && tar xzf {archive} -C /testbed --strip-components=1 --no-same-owner", timeout=300
        )
        assert unpack.exit_code == 0, unpack.output
        for path, (old, new) in edits.items():
            text = sb.read_file(f"/testbed/{path}").decode()
            assert text.count(old) == 1, f"{path}: expected {old!r} once"
            sb.write_file(f"/testbed/{path}", text.replace(old, new))
        for path, text in (new_files or {}).items():
            sb.write_file(f"/testbed/{path}", text, mode=0o755)
        for n, diff in enumerate(reverse):
            sb.write_file(f"/tmp/reverse-{n}.diff", diff)
            undo = sb.exec(f"cd /testbed && git apply -R /tmp/reverse-{n}.diff && rm /tmp/reverse-{n}.diff", timeout=60)
            assert undo.exit_code == 0, undo.output

    return build_layer(prepare, requirements, wheels(requirements, deps=False), "testbed", (str(archive.parent),))
