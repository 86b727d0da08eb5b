"""The folder-to-package mapping of setup.cfg works for a regular (non-editable) install too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_a_regular_install_maps_the_top_level_folders(tmp_path: Path):
    # from a copy of the project's files: setuptools reuses a build/ folder left in the checkout, which would
    # hold modules that setup.cfg no longer maps
    src = tmp_path / "src"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    target = tmp_path / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    for path in (
        "swebox/envs/sandbox/extract.py",
        "swebox/envs/sandbox/csrc/nsinit.c",
        "swebox/envs/sandbox/csrc/session.c",
        "swebox/trainers/rl/grpo.py",
        "swebox/scripts/cli.py",
        "swebox/envs/cache/__init__.py",
        "swebox/envs/tasks/__init__.py",
        "swebox/scripts/viewer/app.py",
        "swebox/scripts/viewer/templates/rollout.html",
        "swebox/scripts/viewer/static/style.css",
    ):  # the viewer serves its own files
        assert (target / path).is_file(), path
    # every module of the three folders, sub-packages too (one missing from setup.cfg's `packages` is left out)
    modules = [
        p.relative_to(ROOT)
        for top in ("envs", "trainers", "scripts")
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts
    ]
    missing = [str(m) for m in modules if not (target / "swebox" / m).is_file()]
    assert not missing, f"not installed (add their packages to setup.cfg's `packages`): {missing}"
    assert not (target / "swebox" / "__init__.py").exists()  # a namespace package: no folder of its own
    code = "import swebox.envs.sandbox as s, swebox.scripts.cli as c; print(s.__file__); print(c.build_parser().prog)"
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(target / "swebox/envs/sandbox/__init__.py"), "swebox"]


def test_the_editable_install_points_at_the_top_level_folders():
    import swebox.envs
    import swebox.scripts
    import swebox.trainers

    assert Path(swebox.envs.__file__).parent == ROOT / "envs"
    assert Path(swebox.trainers.__file__).parent == ROOT / "trainers"
    assert Path(swebox.scripts.__file__).parent == ROOT / "scripts"
