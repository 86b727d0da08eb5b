"""Corpus recipes: loading, validation and finding a project's tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from swebox.envs.tasks.synth.recipe import ProjectRecipe, find_test_paths, load_recipe


def test_recipe_loads_the_default_corpus():
    projects = load_recipe(Path(__file__).resolve().parents[4] / "configs" / "corpus" / "default.yaml")
    assert len(projects) >= 10
    assert all(p.version and p.tests for p in projects)
    pydash = next(p for p in projects if p.name == "pydash")
    assert "no:cov" in pydash.pytest_args
    assert pydash.test_cmd().startswith("/venv/bin/python -m pytest -p no:cov")


def test_recipe_rejects_unknown_keys(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        textwrap.dedent("""
        projects:
          - {name: toolz, version: "1.2.0", testz: [toolz]}
    """)
    )
    with pytest.raises(ValueError, match="unknown keys \\['testz'\\]"):
        load_recipe(path)


def test_recipe_rejects_bad_values():
    with pytest.raises(ValueError, match="exactly one of version"):
        ProjectRecipe(name="x")
    with pytest.raises(ValueError, match="tests must be a list of strings"):
        ProjectRecipe(name="x", version="1", tests="tests")


LAYOUT = [
    "pkg/__init__.py",
    "pkg/core.py",
    "pkg/tests/__init__.py",
    "pkg/tests/test_core.py",
    "pkg/tests/unit/test_deep.py",
    "pkg/testing_utils.py",
    "test_top.py",
    "docs/conf.py",
    "src/other/test_helpers_not_a_test_dir.py",
]


def test_find_test_paths_takes_the_outermost_test_folders_and_root_modules():
    assert find_test_paths(LAYOUT, lambda _p: "") == ("pkg/tests", "test_top.py")
    assert find_test_paths(["tests/test_a.py", "test/test_b.py", "x/y_test.py"], lambda _p: "") == (
        "test",
        "tests",
    )
    assert find_test_paths(["pkg/core.py", "README.md"], lambda _p: "") == ()


@pytest.mark.parametrize(
    ("config", "text"),
    [
        ("pyproject.toml", '[tool.pytest.ini_options]\ntestpaths = ["pkg/tests/unit", "gone"]\n'),
        ("pytest.ini", "[pytest]\ntestpaths =\n    pkg/tests/unit\n    gone\n"),
        ("tox.ini", "[tox]\nenvlist = py\n[pytest]\ntestpaths = pkg/tests/unit gone\n"),
        ("setup.cfg", "[metadata]\nname = pkg\n[tool:pytest]\ntestpaths = pkg/tests/unit\n"),
    ],
)
def test_find_test_paths_prefers_pytests_testpaths_that_exist(config, text):
    files = [*LAYOUT, config]
    assert find_test_paths(files, {config: text}.__getitem__) == ("pkg/tests/unit",)


def test_find_test_paths_ignores_configs_without_or_with_broken_testpaths():
    files = [*LAYOUT, "pyproject.toml", "setup.cfg"]
    texts = {"pyproject.toml": "[tool.pytest.ini_options\nbroken", "setup.cfg": "[tool:pytest]\naddopts = -q\n"}
    assert find_test_paths(files, texts.__getitem__) == ("pkg/tests", "test_top.py")
