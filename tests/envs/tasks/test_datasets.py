"""Dataset rows in their real formats become tasks with their dataset's recipe, test command and grader.

The SWE-bench Verified parquet is the real one (500 rows); SWE-Gym, SWE-smith and R2E-Gym rows use the
columns of their dataset cards. The recipe tables are swebench 4.1.0's and swesmith 0.0.9's, read at run
time (`pip install --no-deps swebench==4.1.0 swesmith==0.0.9`, which `make venv` does).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from swebox.envs.tasks import LoadError, load
from swebox.envs.tasks import recipes as recipes_module
from swebox.envs.tasks.graders.log_parsers import test_directives

VERIFIED = Path("/work/shared/data/swe-bench-verified.parquet")


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def verified():
    if not VERIFIED.exists():
        pytest.skip(f"the SWE-bench Verified parquet is not at {VERIFIED}")
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    return pq.read_table(VERIFIED).to_pylist(), load(VERIFIED)


def test_every_verified_row_becomes_a_task_with_its_recipe(verified):
    rows, tasks = verified
    assert len(tasks) == len(rows) == 500 and not tasks.skipped
    assert Counter(t.repo for t in tasks) == {
        "django/django": 231,
        "sympy/sympy": 75,
        "sphinx-doc/sphinx": 44,
        "matplotlib/matplotlib": 34,
        "scikit-learn/scikit-learn": 32,
        "astropy/astropy": 22,
        "pydata/xarray": 22,
        "pytest-dev/pytest": 19,
        "pylint-dev/pylint": 10,
        "psf/requests": 8,
        "mwaskom/seaborn": 2,
        "pallets/flask": 1,
    }
    assert Counter(t.env.python for t in tasks) == {
        "3.5": 2,
        "3.6": 140,
        "3.7": 1,
        "3.8": 42,
        "3.9": 241,
        "3.10": 22,
        "3.11": 52,
    }
    py311 = {(t.repo, t.version) for t in tasks if t.env.python == "3.11"}
    assert {r for r, _ in py311} == {"django/django", "matplotlib/matplotlib", "pallets/flask"}
    assert {v for r, v in py311 if r == "django/django"} == {"5.0"}
    runners = Counter(t.test_cmd.split()[0] for t in tasks)
    assert runners == {
        "./tests/runtests.py": 231,
        "pytest": 150,
        "tox": 44,
        "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning'": 75,
    }  # sympy's bin/test
    specs = recipes_module._swebench_tables()[0]
    for row, task in zip(rows, tasks, strict=True):
        assert task.grader == "log" and task.log_parser == row["repo"]
        # the env at the setup commit, the task's start at base_commit (a checkout layer over it)
        assert task.env.commit == row["environment_setup_commit"] and task.env.test_deps == ()
        assert task.metadata["checkout"]["commit"] == row["base_commit"] and task.task_layer_key
        spec_cmd = specs[row["repo"]][row["version"]]["test_cmd"]
        assert task.test_cmd == " ".join([spec_cmd, *test_directives(row["repo"], row["test_patch"])])
    # 492 rows have a setup commit other than the base commit: each of those starts elsewhere than its env
    assert sum(t.env.commit != t.metadata["checkout"]["commit"] for t in tasks) == 492


def test_verified_recipes_match_swebench_specs(verified):
    _, tasks = verified
    django = next(t for t in tasks if t.instance_id == "django__django-11099")
    assert django.env.python == "3.6" and "tests/requirements/py3.txt" in django.env.install[0]
    assert django.test_cmd == (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 auth_tests.test_validators"
    )
    assert "export LANG=en_US.UTF-8" in django.eval_commands
    # `locale-gen` writes /etc: it cannot run in a rootless sandbox (the host provides the locale), so it is
    # left out of the commands and recorded
    assert not any("locale-gen" in c for c in django.eval_commands)
    assert any("locale-gen" in c for c in django.metadata["recipe_skipped"])
    assert django.metadata["checkout"]["commands"] and "pip install -e ." in django.metadata["checkout"]["commands"][0]
    sympy = next(t for t in tasks if t.repo == "sympy/sympy")
    assert sympy.test_cmd.startswith(
        "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/"
    )
    assert any("mpmath==1.3.0" in c for c in sympy.env.install)
    pytest_rows = [t for t in tasks if t.repo == "pytest-dev/pytest"]
    assert all("pluggy" in " ".join(t.env.install) for t in pytest_rows)
    # system-image commands (apt-get, locale-gen) cannot run rootless: left out and recorded, never silent
    mpl = next(t for t in tasks if t.repo == "matplotlib/matplotlib" and t.env.python == "3.11")
    assert any("apt-get" in c for c in mpl.metadata["recipe_skipped"])
    assert not any("apt-get" in c for c in mpl.metadata["checkout"]["commands"])
    assert "QHULL_URL" in mpl.metadata["checkout"]["commands"][0]  # one script: the lines share variables


# One real Verified row per repository, and the rows where SWE-bench's rule is not "the .py files of the
# test patch": the selection is the official harness's (swebench's get_test_directives), quirks included
DIRECTIVES = {
    "astropy__astropy-12907": ["astropy/modeling/tests/test_separable.py"],
    "matplotlib__matplotlib-13989": ["lib/matplotlib/tests/test_axes.py"],
    "mwaskom__seaborn-3069": ["tests/_core/test_plot.py"],
    "pallets__flask-5014": ["tests/test_blueprints.py"],
    "psf__requests-1142": ["test_requests.py"],
    "pydata__xarray-2905": ["xarray/tests/test_variable.py"],
    "pylint-dev__pylint-4551": ["tests/unittest_pyreverse_writer.py"],
    "pytest-dev__pytest-10051": ["testing/logging/test_fixture.py"],
    "scikit-learn__scikit-learn-10297": ["sklearn/linear_model/tests/test_ridge.py"],
    # sympy's bin/test takes the test files' paths
    "sympy__sympy-22080": [
        "sympy/codegen/tests/test_rewriting.py",
        "sympy/printing/tests/test_pycode.py",
        "sympy/utilities/tests/test_lambdify.py",
    ],
    # Django: module labels relative to tests/; the fixture .json is no directive, models.py is one
    "django__django-15525": ["backends.sqlite.test_features", "fixtures_regress.models", "fixtures_regress.tests"],
    # a file outside tests/ keeps its path as a dotted label
    "django__django-14011": ["django.test.testcases", "servers.tests"],
    # only .txt data files: no directive at all, so runtests.py runs Django's whole suite, as the harness does
    "django__django-10097": [],
    # sphinx: .rst files and a test root's conf.py are directives, the .txt is not
    "sphinx-doc__sphinx-11510": [
        "tests/roots/test-directive-include/baz/baz.rst",
        "tests/roots/test-directive-include/conf.py",
        "tests/roots/test-directive-include/foo.rst",
        "tests/test_directive_other.py",
    ],
}


def test_test_directives_of_real_rows_follow_swebench_for_each_repository(verified):
    rows, tasks = verified
    by_id = {t.instance_id: t for t in tasks}
    assert {by_id[i].repo for i in DIRECTIVES} == {t.repo for t in tasks}  # every repository of Verified
    specs = recipes_module._swebench_tables()[0]
    for instance_id, directives in DIRECTIVES.items():
        task = by_id[instance_id]
        assert task.test_cmd == " ".join([specs[task.repo][task.version]["test_cmd"], *directives]), instance_id
    sympy = by_id["sympy__sympy-22080"]
    assert sympy.test_cmd == (
        "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose "
        "sympy/codegen/tests/test_rewriting.py sympy/printing/tests/test_pycode.py "
        "sympy/utilities/tests/test_lambdify.py"
    )


SWEGYM = {  # SWE-Gym's columns: SWE-bench's, with the id lists as lists
    "instance_id": "getmoto__moto-5752",
    "hints_text": "",
    "patch": "diff --git a/moto/x.py b/moto/x.py\n",
    "test_patch": "diff --git a/tests/test_ssm/test_ssm_boto3.py b/tests/test_ssm/test_ssm_boto3.py\n",
    "created_at": "2022-12-10T20:23:01Z",
    "problem_statement": "ssm",
    "repo": "getmoto/moto",
    "base_commit": "b2300f1eae1323e3e8bc45f97e530ce129dff12e",
    "version": "4.0",
    "PASS_TO_PASS": ["tests/test_ssm/test_ssm_boto3.py::test_get_parameter"],
    "FAIL_TO_PASS": ["tests/test_ssm/test_ssm_boto3.py::test_describe_parameters__multiple_tags"],
    "environment_setup_commit": "b2300f1eae1323e3e8bc45f97e530ce129dff12e",
}


def test_swegym_rows_need_a_recipe_and_take_one_from_swebox_swe_specs(tmp_path, monkeypatch):
    rows = _jsonl(tmp_path / "gym.jsonl", [SWEGYM])
    monkeypatch.delenv("SWEBOX_SWE_SPECS", raising=False)
    with pytest.raises(
        LoadError,
        match=r"field 'repo'.*'getmoto/moto', which has none.*version '4\.0'.*"
        r"SWEBOX_SWE_SPECS: \{\"getmoto/moto\": \{\"4\.0\"",
    ):
        load(rows)
    specs = tmp_path / "specs.json"
    specs.write_text(
        json.dumps(
            {
                "getmoto/moto": {
                    "4.0": {
                        "python": "3.12",
                        "install": "make init",
                        "test_cmd": "pytest -n0 -rA",
                        "pip_packages": ["boto3==1.26.0"],
                    }
                }
            }
        )
    )
    monkeypatch.setenv("SWEBOX_SWE_SPECS", str(specs))
    (task,) = load(rows)
    assert task.env.python == "3.12" and task.env.install == ("pip install boto3==1.26.0",)
    # moto has no SWE-bench parser of its own: the plain pytest one reads its log
    assert task.test_cmd == "pytest -n0 -rA tests/test_ssm/test_ssm_boto3.py" and task.log_parser == "pytest"
    assert task.metadata["checkout"] == {"commit": SWEGYM["base_commit"], "commands": ["bash -c 'set -e\nmake init'"]}
    with pytest.raises(LoadError, match=r"field 'version'.*'9\.9'"):
        load(_jsonl(tmp_path / "v.jsonl", [SWEGYM | {"version": "9.9", "repo": "django/django"}]))


def test_swesmith_rows_in_their_real_format(tmp_path):
    row = {
        "instance_id": "mewwts__addict.75284f95.func_pm_remove_assign__8z2cqvhd",
        "patch": "diff --git a/addict/addict.py b/addict/addict.py\n--- a/addict/addict.py\n+++ b/addict/addict.py\n"
        "@@ -1,2 +1,2 @@\n-a = 1\n+a = 2\n b\n",
        "FAIL_TO_PASS": ["test_addict.py::DictTests::test_set_one_level_item"],
        "PASS_TO_PASS": ["test_addict.py::DictTests::test_get"],
        "image_name": "swebench/swesmith.x86_64.mewwts_1776_addict.75284f95",
        "repo": "swesmith/mewwts__addict.75284f95",
        "problem_statement": "set fails",
    }
    (task,) = load(_jsonl(tmp_path / "smith.jsonl", [row]))
    assert task.repo == "mewwts/addict" and task.env.commit == "75284f95" and task.env.python == "3.10"
    assert task.env.install == ("python -m pip install -e .",) and task.env.test_deps == ("pytest",)
    assert task.bug_patch == row["patch"] and "+a = 1" in task.patch  # the fix is the bug reversed
    assert task.hidden_tests and task.test_files == ("test_addict.py",) and task.grader == "junit"
    with pytest.raises(LoadError, match=r"field .repo.*a profile in swesmith 0\.0\.9; found none for nobody/none"):
        load(_jsonl(tmp_path / "bad.jsonl", [row | {"repo": "swesmith/nobody__none.12345678"}]))
    # 5 of swesmith's profiles install system packages: the row loads, cache build refuses it naming its image
    from swebox.scripts.cache_cli import read_build_plan

    pdf = row | {
        "instance_id": "jsvine__pdfplumber.02ff4313.x",
        "repo": "swesmith/jsvine__pdfplumber.02ff4313",
        "image_name": "swebench/swesmith.x86_64.jsvine_1776_pdfplumber.02ff4313",
    }
    (task,) = load(_jsonl(tmp_path / "pdf.jsonl", [pdf]))
    assert task.metadata["recipe_unbuildable"] == ["apt-get update && apt-get install ghostscript -y"]
    assert not any("apt-get" in c for c in task.env.install)
    (error,) = read_build_plan(str(tmp_path / "pdf.jsonl"))[2]
    assert error.startswith("task jsvine__pdfplumber.02ff4313.x: its recipe runs 'apt-get update && apt-get")
    assert "Use its image swebench/swesmith.x86_64.jsvine_1776_pdfplumber.02ff4313: `swebox cache build" in error


def test_r2e_rows_get_expected_status_and_an_env_only_from_a_recipe(tmp_path, monkeypatch):
    commit = {"old_commit_hash": "a" * 40, "new_commit_hash": "b" * 40, "file_diffs": []}
    row = {
        "repo_name": "pandas",
        "docker_image": "namanjain12/pandas_final:" + "b" * 40,
        "commit_hash": "b" * 40,
        "parsed_commit_content": json.dumps(commit),
        "execution_result_content": json.dumps(
            {"test_file_codes": ["def test_a():\n    pass\n"], "test_file_names": ["test_1.py"]}
        ),
        "modified_files": ["pandas/core/frame.py"],
        "relevant_files": [],
        "num_non_test_files": 1,
        "num_non_test_func_methods": 1,
        "num_non_test_lines": 3,
        "prompt": "gold inside",
        "problem_statement": "frame",
        "expected_output_json": json.dumps({"TestFrame.test_a": "PASSED", "TestFrame.test_b": "FAILED"}),
    }
    monkeypatch.delenv("SWEBOX_SWE_SPECS", raising=False)
    (task,) = load(_jsonl(tmp_path / "r2e.jsonl", [row]))
    assert task.repo == "pandas-dev/pandas" and task.base_commit == "a" * 40 and task.env is None
    assert task.expected_status == {"TestFrame.test_a": "PASSED", "TestFrame.test_b": "FAILED"}
    from swebox.scripts.cache_cli import read_build_plan

    (error,) = read_build_plan(str(tmp_path / "r2e.jsonl"))[2]  # what is missing, and both ways to get it
    assert 'give pandas-dev/pandas a recipe under version "r2e" in $SWEBOX_SWE_SPECS' in error
    assert f"its image namanjain12/pandas_final:{'b' * 40} with --env-source image" in error
    specs = tmp_path / "specs.json"
    specs.write_text(
        json.dumps(
            {"pandas-dev/pandas": {"r2e": {"python": "3.11", "install": "pip install -e .", "test_cmd": "pytest -rA"}}}
        )
    )
    monkeypatch.setenv("SWEBOX_SWE_SPECS", str(specs))
    (task,) = load(_jsonl(tmp_path / "r2e.jsonl", [row]))
    assert task.env.commit == "a" * 40 and task.env.install == ("bash -c 'set -e\npip install -e .'",)


def test_without_swebench_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "swebench" else real(name, *a))
    recipes_module._swebench_tables.cache_clear()
    monkeypatch.delenv("SWEBOX_SWE_SPECS", raising=False)
    try:
        with pytest.raises(LoadError, match=r"pip install --no-deps swebench==4\.1\.0"):
            load(_jsonl(tmp_path / "t.jsonl", [SWEGYM | {"repo": "django/django", "version": "3.0"}]))
    finally:
        recipes_module._swebench_tables.cache_clear()


# -- the system lines of SWE-bench's specs: replaced rootless (locales) or refused (system packages) ---------
def test_locale_lines_become_a_rootless_locale_and_system_packages_make_the_recipe_unbuildable(verified):
    _, tasks = verified
    with_locale = [t for t in tasks if any("localedef -i en_US -f UTF-8" in c for c in t.env.install)]
    assert Counter(t.repo for t in with_locale) == {"django/django": 113}
    for task in with_locale:  # glibc finds the env layer's locale before the row's own exports select it
        assert task.eval_commands[0] == f"export LOCPATH={recipes_module.LOCALE_DIR}"
        assert any("locale" in line for line in task.metadata["recipe_skipped"])
        assert "recipe_unbuildable" not in task.metadata
    unbuildable = [t for t in tasks if t.metadata.get("recipe_unbuildable")]
    assert Counter(t.repo for t in unbuildable) == {"matplotlib/matplotlib": 34, "sphinx-doc/sphinx": 2}
    assert all(line.startswith("apt-get") for t in unbuildable for line in t.metadata["recipe_unbuildable"])
    sphinx = next(t for t in unbuildable if t.repo == "sphinx-doc/sphinx")
    assert sphinx.metadata["recipe_unbuildable"] == ["apt-get update && apt-get install -y graphviz"]


def test_cache_build_refuses_an_unbuildable_recipe_naming_the_line_and_the_image(verified, tmp_path):
    from swebox.scripts.cache_cli import read_build_plan

    rows, _ = verified
    picked = [r for r in rows if r["instance_id"] in ("matplotlib__matplotlib-13989", "pallets__flask-5014")]
    envs, checkouts, errors = read_build_plan(str(_jsonl(tmp_path / "rows.jsonl", picked)))
    assert [e.commit for e in envs] == [r["environment_setup_commit"] for r in picked if "flask" in r["repo"]]
    assert len(checkouts) == 1 and len(errors) == 1
    assert errors[0].startswith("task matplotlib__matplotlib-13989: its recipe runs 'apt-get -y update")
    assert "swebench/sweb.eval.x86_64.matplotlib_1776_matplotlib-13989:latest" in errors[0]
    assert "--env-source image" in errors[0]


def test_the_recipe_locale_is_made_and_found_without_root_in_a_sandbox(calc_layer):
    from swebox.envs.sandbox import Sandbox, SandboxPolicy

    spec = {
        "python": "3.11",
        "test_cmd": "./tests/runtests.py",
        "eval_commands": ["sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen", "export LC_ALL=en_US.UTF-8"],
    }
    recipe = recipes_module.recipe_from_spec(spec)
    (make,) = recipe.env_install
    check = "/venv/bin/python -c 'import locale; print(locale.setlocale(locale.LC_ALL, \"\"))'"
    with Sandbox([calc_layer], SandboxPolicy(network="none")) as sb:
        if sb.exec("locale -a", timeout=30).output.lower().count("en_us.utf8"):
            pytest.skip("this host has en_US.UTF-8 already: the replacement cannot be told from the host's")
        without = sb.exec(f"export LC_ALL=en_US.UTF-8; {check}", timeout=60)
        assert without.exit_code != 0 and "unsupported locale setting" in without.output
        built = sb.exec(make, timeout=120)
        assert built.exit_code == 0, built.output
        found = sb.exec(" && ".join([*recipe.eval_commands, check]), timeout=60)
        assert found.exit_code == 0 and found.output.strip().endswith("en_US.UTF-8"), found.output


# -- environment.yml recipes (xarray): conda names to PyPI's, conda-only packages left out and said ----------
XARRAY_YML = """name: xarray-tests
channels:
  - conda-forge
dependencies:
  - cdms2
  - dask-core
  - fsspec!=2021.7.0
  - hdf5
  - iris
  - lxml    # Optional dep of pydap
  - matplotlib-base
  - numpy=1.23
  - pip
  - python=3.10
  - pip:
      - numbagg
"""


def test_environment_yml_becomes_pypi_names_without_the_conda_only_packages(verified, tmp_path):
    import shlex
    import subprocess

    _, tasks = verified
    task = next(t for t in tasks if t.instance_id == "pydata__xarray-6721")
    assert task.metadata["recipe_conda_only"] == ["cdms2", "hdf5"]
    (translate,) = [c for c in task.env.install if "environment.yml" in c]
    (tmp_path / "ci" / "requirements").mkdir(parents=True)
    (tmp_path / "ci" / "requirements" / "environment.yml").write_text(XARRAY_YML)
    # the recipe's own command, with pip replaced by printing what it would install
    script = shlex.split(translate)[2].replace("pip install -r", "cat")
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    wanted = ["dask", "fsspec!=2021.7.0", "scitools-iris", "lxml", "matplotlib", "numpy==1.23", "numbagg"]
    assert out.stdout.split() == wanted + wanted
    assert "left out the conda-only package cdms2: CDAT's cdms2 is published on conda-forge only" in out.stderr
    assert "left out the conda-only package hdf5" in out.stderr


def test_cache_build_refuses_a_row_whose_tests_need_a_conda_only_package(verified, tmp_path):
    from swebox.scripts.cache_cli import read_build_plan

    rows, _ = verified
    picked = [r for r in rows if r["instance_id"] in ("pydata__xarray-6992", "pydata__xarray-6721")]
    envs, checkouts, errors = read_build_plan(str(_jsonl(tmp_path / "rows.jsonl", picked)))
    assert len(envs) == 1 and len(checkouts) == 1 and len(errors) == 1  # 6721's P2P names no cdms2 test
    assert errors[0].startswith(
        "task pydata__xarray-6992: expected graded tests that need no conda-only package; "
        "found 2 naming cdms2 (e.g. xarray/tests/test_dataarray.py::TestDataArray::"
        "test_to_and_from_cdms2_classic)"
    )
    assert "sweb.eval.x86_64.pydata_1776_xarray-6992:latest" in errors[0]
