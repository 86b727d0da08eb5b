"""Fixture env layers for tests: a tiny project in git at /testbed and a venv with pytest at /venv.

Built inside a sandbox the way the cache builder builds real env layers (the venv is created at /venv, so its
scripts are right), from this interpreter (bound read-only) and pytest wheels: the machine's local wheel
folder when it has them, else downloaded once from the package index into ~/.cache/swebox/test-wheels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
from swebox.envs.sandbox import Layer, Sandbox, SandboxPolicy

PYTEST = "pytest==8.4.2"
LOCAL_WHEELS = Path("/opt/pypi/files")
CACHED_WHEELS = Path(os.path.expanduser("~/.cache/swebox/test-wheels"))


def wheels(requirements: list[str], *, deps: bool = True) -> Path:
    """A folder holding the wheels of ``requirements`` (name==version each; their dependencies too unless
    ``deps`` is False): the machine's local wheel folder when it has them for this interpreter (its tags), else
    CACHED_WHEELS."""

    usable = set(sys_tags())  # a wheel of the right name and version built for another Python is no help

    def have(folder: Path) -> bool:
        return all(
            any(
                not usable.isdisjoint(parse_wheel_filename(p.name)[3])
                for p in folder.glob(f"{r.split('==')[0]}-{r.split('==')[1]}-*.whl")
            )
            for r in requirements
        )

    if have(LOCAL_WHEELS):
        return LOCAL_WHEELS
    if not have(CACHED_WHEELS):
        CACHED_WHEELS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                *([] if deps else ["--no-deps"]),
                "-d",
                str(CACHED_WHEELS),
                *requirements,
            ],
            check=True,
            timeout=600,
        )
        os.chmod(CACHED_WHEELS, 0o755)
    return CACHED_WHEELS


def build_layer(
    prepare: Callable[[Sandbox], None], requirements: list[str], folder: Path, pth: str, binds: tuple[str, ...] = ()
) -> Layer:
    """An env layer: ``prepare(sandbox)`` writes /testbed, which is committed in git; /venv is made from this
    interpreter with ``requirements`` installed from the wheels in ``folder`` and /testbed importable through
    ``pth``.pth. ``binds``: host folders ``prepare`` reads (read-only)."""
    py = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    python = Path(sys.base_prefix) / "bin" / py
    empty = Path(os.environ.get("TMPDIR", "/tmp")) / f"swebox-empty-layer-{os.getpid()}"
    empty.mkdir(exist_ok=True)
    with Sandbox([empty], SandboxPolicy(ro_binds=(str(folder), *binds, sys.base_prefix))) as sb:
        prepare(sb)
        build = sb.exec(
            "set -e; cd /testbed && git init -q -b main && git add -A && "
            "git -c user.name=t -c user.email=t@t commit -qm base && "
            f"{python} -m venv /venv && PIP_CONFIG_FILE=/dev/null /venv/bin/pip install -q "
            f"--no-compile --no-index --find-links {folder} {' '.join(requirements)} && "
            f"echo /testbed > /venv/lib/{py}/site-packages/{pth}.pth && "
            "find /venv -name __pycache__ -prune -exec rm -rf {} +",
            timeout=600,
        )
        assert build.exit_code == 0, build.output
        layer = sb.snapshot()
    empty.rmdir()
    # the layer's maker records the interpreter its venv needs, as the env builder does in its manifest
    layer.interpreters = (sys.base_prefix,)
    return layer.persist()


def build_env_layer(files: dict[str, str], package: str, requirements: tuple[str, ...] = ()) -> Layer:
    """An env layer: `files` (repository-relative) committed in /testbed, `package` importable from /venv, with
    pytest and `requirements` (name==version each; their dependencies come from the same wheel folder) installed."""

    def prepare(sb: Sandbox) -> None:
        sb.exec("mkdir -p " + " ".join(sorted({str(Path("/testbed", name).parent) for name in files})))
        for name, text in files.items():
            sb.write_file(f"/testbed/{name}", text)

    needed = [PYTEST, *requirements]
    return build_layer(prepare, needed, wheels(needed), f"{package}_editable")


def discard_env_layer(layer: Layer) -> None:
    """Remove a layer made by build_env_layer: its folder and the record beside it."""
    import shutil

    from swebox.envs.sandbox.layers import record_path

    shutil.rmtree(layer.path, ignore_errors=True)
    record_path(layer.path).unlink(missing_ok=True)
