"""Modules moved in issue #30 keep their old names: the same module object, mock.patch on the old name, ``-m``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from swebox.envs.old_names import MOVED

REPO = Path(__file__).resolve().parents[1]
# modules whose import needs an optional package this interpreter may lack (Harbor needs Python >= 3.12)
OPTIONAL = {"swebox.envs.frameworks.harbor_env": "harbor"}


def _module_path(name: str) -> Path:
    top, *rest = name.split(".")[1:]
    return REPO.joinpath(top, *rest).with_suffix(".py")


def test_every_moved_module_names_a_file_and_no_old_name_is_one():
    assert len(MOVED) >= 50
    for old, new in MOVED.items():
        assert _module_path(new).is_file(), f"{old} -> {new}: no such module"
        assert not _module_path(old).exists(), f"{old} is a file again: drop it from MOVED or the file"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_imports_the_same_module(old):
    new = MOVED[old]
    if new in OPTIONAL and importlib.util.find_spec(OPTIONAL[new]) is None:
        with pytest.raises(ImportError, match=OPTIONAL[new]):
            importlib.import_module(old)
        return
    assert importlib.import_module(old) is importlib.import_module(new)
    assert sys.modules[old] is sys.modules[new]
    parent, _, child = old.rpartition(".")
    assert getattr(sys.modules[parent], child) is sys.modules[new]  # `import a.b.c; a.b.c.X` works too


def test_from_old_import_and_mock_patch_on_an_old_name_reach_the_real_module():
    from swebox.envs.episodes.episode import SWEEpisode as now
    from swebox.envs.swe_env import SWEEpisode
    from swebox.envs.tasks.graders import grading
    from swebox.envs.tasks.grading import grade

    assert SWEEpisode is now and grade is grading.grade
    with mock.patch("swebox.envs.tasks.grading.grade") as patched:
        assert grading.grade is patched
    assert grading.grade is grade


def test_python_dash_m_runs_the_moved_module_under_its_old_name(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"files": {}, "out": str(tmp_path)}))
    out = subprocess.run(
        [sys.executable, "-m", "swebox.envs.tasks.rewrite_tests", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"written": []}


def test_an_unknown_name_still_fails_to_import():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("swebox.envs.no_such_module")
