"""Environment recipes of public SWE datasets, read at run time from the packages of the field.

- SWE-bench (and SWE-Gym, SWE-bench-extra: the same row format): ``swebench==4.1.0``'s per-repo/version
  table ``MAP_REPO_VERSION_TO_SPECS_PY`` (Python version, ``packages``, ``pip_packages``, ``pre_install``,
  ``install``, ``eval_commands``, ``test_cmd``) and ``MAP_REPO_TO_REQS_PATHS``. 4.1 is the last release with
  that table (5.x moved specs into per-instance scripts). Only the file holding the table,
  ``swebench/harness/constants/python.py``, is executed: it imports nothing, while importing the
  ``swebench`` package pulls in docker, datasets, modal and more.
- SWE-smith: ``swesmith``'s per-repo profiles (``python_version``, ``install_cmds``), read from
  ``swesmith/profiles/python.py`` without importing it (the package imports docker and GitHub clients):
  recipes_swesmith.py.
- Anything else, or an override: a JSON file named by ``$SWEBOX_SWE_SPECS`` in the table's shape,
  ``{"owner/name": {"version": {spec}}}`` (a spec may add ``"requirements_paths"`` and
  ``"environment_yml_paths"``). SWE-Gym's own specs, which no package ships, go there.

A recipe becomes an env layer (interpreter + dependencies at ``environment_setup_commit``) and the commands
run once the repository is at ``base_commit`` (``pre_install`` + ``install``, in the checkout layer), as
SWE-bench's environment and instance images split them. Differences, all documented in docs/datasets.md:
conda packages are installed with pip; an ``environment.yml`` is translated to pip requirements. Commands
that change the system image cannot run in a rootless sandbox, and a row must not silently get another
environment, so each is either replaced or makes the recipe unbuildable (both recorded in ``Recipe.skipped``):
locale generation (``locale-gen``, ``/etc/locale.gen``, ``apt-get install -y locales``) becomes glibc's own
``localedef`` into the env layer, found through ``LOCPATH``; any other (``apt-get install`` of system
packages) is listed in ``Recipe.unbuildable``, and ``swebox cache build`` refuses the row naming the line and
the dataset's container image as the way to get that environment.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swebox.envs.tasks.recipes_multilingual import (
    is_multilingual_spec,
    multilingual_recipe,
    swebench_multilingual_recipe,
)
from swebox.envs.tasks.schema import TaskError

SWEBENCH_VERSION = "4.1.0"
SPECS_ENV = "SWEBOX_SWE_SPECS"
SYSTEM_LINE = re.compile(r"^\s*(apt-get|apt|locale-gen|update-locale)\b|>\s*/etc/|\s/etc/locale")
"""A recipe line that changes the system image: replaced (locales) or making the recipe unbuildable."""
# a system line that only makes a locale: SWE-bench's Django specs (`sed ... /etc/locale.gen && locale-gen`,
# `echo 'en_US UTF-8' > /etc/locale.gen`, `locale-gen en_US.UTF-8`, `apt-get ... install -y locales`)
_LOCALE_LINE = re.compile(r"locale-gen|/etc/locale\.gen|^\s*apt-get update && apt-get install -y locales\s*$")
_LOCALE_NAME = re.compile(r"\b([a-z]{2,3}_[A-Z]{2})[. ](UTF-8)\b")
LOCALE_DIR = "/venv/share/swebox-locales"
"""Where the env layer keeps the locales a recipe generates (glibc reads them through ``LOCPATH``)."""
CONDA_TO_PIP = {"matplotlib-base": "matplotlib", "dask-core": "dask", "iris": "scitools-iris"}
"""conda-forge packages whose PyPI project has another name (the same code: conda-forge's recipes build
these PyPI projects)."""
CONDA_ONLY = {
    "cdms2": "CDAT's cdms2 is published on conda-forge only (PyPI has no release of it)",
    "hdf5": "the HDF5 C library, not a Python package (h5py's and netCDF4's wheels carry their own copy)",
}
"""conda-forge packages with no PyPI release: left out of a translated environment.yml (the build log says
so, ``metadata.recipe_conda_only`` lists them) and a row whose tests name one is refused (:func:`conda_only_tests`):
xarray's tests skip what they cannot import, so only a row that grades such a test would get another verdict."""
# environment.yml -> pip requirements: conda's `name=1.2` pins become `name==1.2`, channel prefixes go,
# conda names become PyPI's (CONDA_TO_PIP), conda-only packages are left out (CONDA_ONLY, said on stderr),
# the `- pip:` sub-list is kept as it is; python and pip themselves are the venv's
_YML_TO_PIP = r"""
import json, re, sys
rename, conda_only = json.loads(sys.argv[2]), json.loads(sys.argv[3])
section, pip_indent, pip, left_out = '', -1, [], []
for raw in open(sys.argv[1]):
    line = raw.split('#')[0].rstrip()
    if not line.strip():
        continue
    if not line[0].isspace() and not line.startswith('-'):
        section, pip_indent = line.split(':')[0], -1
        continue
    item, indent = line.strip(), len(line) - len(line.lstrip())
    if section != 'dependencies' or not item.startswith('-'):
        continue
    item = item[1:].strip()
    if pip_indent >= 0 and indent > pip_indent:
        pip.append(item)
        continue
    pip_indent = -1
    if item.replace(' ', '') == 'pip:':
        pip_indent = indent
        continue
    m = re.match(r'^([A-Za-z0-9_.-]+)\s*(.*)$', item.split('::')[-1])
    if not m or m.group(1) in ('python', 'pip'):
        continue
    if m.group(1).lower() in conda_only:
        left_out.append(m.group(1) + ': ' + conda_only[m.group(1).lower()])
        continue
    version = m.group(2).replace(' ', '')
    name = rename.get(m.group(1).lower(), m.group(1))
    print(name + ('=' + version if version.startswith('=') and not version.startswith('==') else version))
print('\n'.join(pip))
for why in left_out:
    print('swebox: left out the conda-only package ' + why, file=sys.stderr)
"""


@dataclass(frozen=True)
class Recipe:
    """What a dataset's spec says about one repo/version, in swebox's terms."""

    python: str
    """Interpreter version, e.g. '3.9'."""
    env_install: tuple[str, ...]
    """Commands of the env layer (dependencies, at the env's commit), run in /testbed with /venv active."""
    repo_commands: tuple[str, ...]
    """Commands run once the repository is at the task's commit (pre_install + install), one shell script."""
    test_cmd: str
    """The harness's test command, without directives."""
    eval_commands: tuple[str, ...] = ()
    """Commands the harness runs before the tests (locale exports, ...)."""
    skipped: tuple[str, ...] = ()
    """Spec commands left out because they change the system image (apt-get, locale-gen): replaced (locales)
    or in ``unbuildable``."""
    unbuildable: tuple[str, ...] = ()
    """The skipped commands with no rootless equivalent (system packages): the env cannot be built from the
    recipe; the dataset's container image has it (``swebox cache build --env-source image``)."""
    conda_only: tuple[str, ...] = ()
    """Packages an ``environment.yml`` recipe leaves out because only conda has them (:data:`CONDA_ONLY`)."""
    grader: str = "log"
    """'log' (the harness's test command, its log read by the repo's parser) or, for recipes of one's own
    (a spec's ``"grader": "junit"``, pytest suites only), 'junit': swebox's pytest runner."""
    language: str = "python"
    """Task.language of the rows: 'python', or 'javascript'/'typescript'/'go'/'rust' (:mod:`.recipes_multilingual`)."""
    log_parser: str = ""
    """The parser name when it is not the row's repository key ('' for Python recipes: :func:`log_parser_for`)."""
    toolchains: tuple[str, ...] = ()
    """The toolchain layers the env is built and tested on (``EnvSpec.toolchains``: ('node',), ('go',) ...)."""
    tool_versions: tuple[tuple[str, str], ...] = ()
    """The toolchain versions the dataset's image has (a spec's ``docker_specs``: ``node_version``,
    ``go_version``, ``rust_version``); recorded in the task's metadata, not installed."""


def _load_file(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a path ending in .py always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_dir(package: str, pin: str) -> Path:
    found = importlib.util.find_spec(package)  # finds the folder without running the package's __init__
    if found is None or not found.submodule_search_locations:
        raise TaskError(
            f"Task.version: reading {package}'s environment recipes needs the package {package}=={pin}; found "
            f"it not installed. Install it without its heavy dependencies: `pip install --no-deps "
            f"{package}=={pin}`, or give the recipe in a JSON file named by ${SPECS_ENV}."
        )
    version = importlib.metadata.version(package)
    if version != pin:
        raise TaskError(
            f"Task.version: expected {package}=={pin} (its recipe table is what swebox reads); found "
            f"{package} {version}. Install `pip install --no-deps {package}=={pin}`."
        )
    return Path(list(found.submodule_search_locations)[0])


@functools.lru_cache(maxsize=1)
def _swebench_tables() -> tuple[dict, dict, dict]:
    path = package_dir("swebench", SWEBENCH_VERSION) / "harness" / "constants" / "python.py"
    module = _load_file(path, "_swebox_swebench_specs")
    return module.MAP_REPO_VERSION_TO_SPECS_PY, module.MAP_REPO_TO_REQS_PATHS, module.MAP_REPO_TO_ENV_YML_PATHS


@functools.lru_cache(maxsize=8)
def _user_table(path: str, mtime: float) -> dict:
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskError(
            f"Task.version: ${SPECS_ENV}={path}: expected a JSON file of "
            f'{{"owner/name": {{"version": {{spec}}}}}}; found {exc}.'
        ) from None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise TaskError(f"Task.version: ${SPECS_ENV}={path}: expected an object of repo -> version -> spec.")
    return table


def user_specs() -> dict:
    """The recipes of ``$SWEBOX_SWE_SPECS`` ({} when unset)."""
    path = os.environ.get(SPECS_ENV, "")
    if not path:
        return {}
    return _user_table(path, Path(path).stat().st_mtime if Path(path).exists() else 0.0)


def _own(spec: dict) -> Recipe:
    return recipe_from_spec(spec, spec.get("requirements_paths", ()), spec.get("environment_yml_paths", ()))


def user_recipe(repo: str, version: str) -> Recipe | None:
    """The recipe ``$SWEBOX_SWE_SPECS`` gives ``repo`` at ``version`` (or under ``"*"``, any version)."""
    user = user_specs().get(repo, {})
    spec = user.get(version, user.get("*"))
    if spec is not None and is_multilingual_spec(spec):
        return multilingual_recipe(spec, repo)
    return None if spec is None else _own(spec)


def swebench_recipe(repo: str, version: str) -> Recipe:
    """The recipe of a SWE-bench-format row (``$SWEBOX_SWE_SPECS`` first, then swebench's table); a TaskError
    naming the row's repo or version when there is none."""
    own = user_recipe(repo, version)
    if own is not None:
        return own
    table, reqs, ymls = _swebench_tables()
    multilingual = None if repo in table else swebench_multilingual_recipe(repo, version)
    if multilingual is not None:
        return multilingual
    if repo not in table:
        raise TaskError(
            f"Task.repo: expected a repository with an environment recipe (swebench {SWEBENCH_VERSION} knows "
            f"{len(table)}: {', '.join(sorted(table)[:4])}, ...); found {repo!r}, which has none. Give its recipe "
            f'for version {version!r} in a JSON file named by ${SPECS_ENV}: {{"{repo}": {{"{version}": {{"python": '
            f'..., "install": ..., "test_cmd": ...}}}}}} (docs/datasets.md, "SWE-Gym": SWE-Gym\'s own specs are '
            f"published in a fork of SWE-bench on GitHub, in no package)."
        )
    if version not in table[repo]:
        raise TaskError(
            f"Task.version: expected a version of {repo} with a recipe ({', '.join(sorted(table[repo]))}); found "
            f"{version!r}. Give one in ${SPECS_ENV}."
        )
    return recipe_from_spec(table[repo][version], reqs.get(repo, ()), ymls.get(repo, ()))


def _requirements_command(paths: list[str]) -> str:
    # SWE-bench reads the first of the repo's requirements files that exists at the setup commit and drops
    # lines starting with '-e .', '#' and '.[test' (the project itself is installed later, at base_commit)
    if not paths:
        raise TaskError(
            "Task.version: the recipe installs 'requirements.txt' but names no requirements file; "
            "add \"requirements_paths\" to the spec."
        )
    candidates = " ".join(shlex.quote(p) for p in paths)
    return (
        f"f=; for p in {candidates}; do if [ -f \"$p\" ]; then f=$p; break; fi; done; "
        f"[ -n \"$f\" ] || {{ echo 'none of the requirements files exists: {' '.join(paths)}' >&2; exit 1; }}; "
        "grep -Ev '^[[:space:]]*(-e \\.|#|\\.\\[test)' \"$f\" > \"$f.swebox\"; "
        "cd \"$(dirname \"$f\")\" && pip install -r \"$(basename \"$f\").swebox\"; s=$?; "
        "rm -f \"$f.swebox\"; exit $s"
    )


def _script(text: str) -> str:
    """One command for the builders' persistent shell: its own bash, so `exit`, `cd` and `set -e` stay in it."""
    return "bash -c " + shlex.quote(text)


def recipe_from_spec(spec: dict, reqs_paths=(), yml_paths=()) -> Recipe:
    """A SWE-bench-style spec dict -> :class:`Recipe`; ``reqs_paths``/``yml_paths``: where the repository keeps
    the requirements file / environment.yml its ``packages`` names (the first that exists is used)."""
    if "python" not in spec or "test_cmd" not in spec:
        raise TaskError(f"Task.version: expected a spec with 'python' and 'test_cmd'; found keys {sorted(spec)}.")
    env: list[str] = []
    packages = spec.get("packages", "")
    if packages == "requirements.txt":
        env.append(_script(_requirements_command(list(reqs_paths))))
    elif packages == "environment.yml":
        script = shlex.quote(_YML_TO_PIP)
        candidates = " ".join(shlex.quote(p) for p in (yml_paths or ("environment.yml",)))
        env.append(
            _script(
                f"f=; for p in {candidates}; do [ -f \"$p\" ] && f=$p && break; done; "
                f"[ -n \"$f\" ] || {{ echo 'none of the environment files exists: {candidates}' >&2; exit 1; }}; "
                f"python -c {script} \"$f\" {shlex.quote(json.dumps(CONDA_TO_PIP))} "
                f"{shlex.quote(json.dumps(CONDA_ONLY))} > /tmp/swebox-env-yml.txt && cat /tmp/swebox-env-yml.txt && "
                "pip install -r /tmp/swebox-env-yml.txt"
            )
        )
    elif packages:
        env.append("pip install " + " ".join(shlex.quote(p) for p in shlex.split(packages)))
    if spec.get("pip_packages"):
        env.append("pip install " + " ".join(shlex.quote(p) for p in spec["pip_packages"]))
    lines = [*spec.get("pre_install", ()), *([spec["install"]] if spec.get("install") else [])]
    evals = tuple(spec.get("eval_commands", ()))  # Django's start with `sed ... /etc/locale.gen && locale-gen`
    skipped = tuple(c for c in (*lines, *evals) if SYSTEM_LINE.search(c))
    kept = [c for c in lines if c not in skipped]
    env += locale_commands(skipped)
    # one script: SWE-bench's pre_install lines share shell variables (matplotlib's QHULL_* ones)
    repo = (_script("set -e\n" + "\n".join(kept)),) if kept else ()
    test_cmd = spec["test_cmd"]
    if isinstance(test_cmd, (list, tuple)):
        test_cmd = " && ".join(test_cmd)
    grader = spec.get("grader", "log")
    if grader not in ("log", "junit") or (grader == "junit" and not str(test_cmd).startswith("pytest")):
        raise TaskError(
            f"Task.version: a spec's grader must be 'log', or 'junit' with a 'pytest ...' test_cmd; "
            f"found grader {grader!r} with test_cmd {test_cmd!r}."
        )
    kept_evals = tuple(c for c in evals if not SYSTEM_LINE.search(c))
    if locale_commands(skipped):
        kept_evals = (f"export LOCPATH={LOCALE_DIR}", *kept_evals)
    return Recipe(
        python=str(spec["python"]),
        env_install=tuple(env),
        repo_commands=repo,
        test_cmd=str(test_cmd),
        eval_commands=kept_evals,
        skipped=skipped,
        grader=grader,
        unbuildable=unbuildable_lines(skipped),
        conda_only=tuple(sorted(CONDA_ONLY)) if packages == "environment.yml" else (),
    )


def locale_commands(skipped: tuple[str, ...]) -> list[str]:
    """What the skipped locale lines make (``locale-gen``), made without root by glibc's ``localedef``."""
    locale_lines = [c for c in skipped if _LOCALE_LINE.search(c)]
    locales = sorted(
        {m for c in locale_lines for m in _LOCALE_NAME.findall(c)} or ({("en_US", "UTF-8")} if locale_lines else set())
    )  # `apt-get install locales` alone
    return [
        f"mkdir -p {LOCALE_DIR} && (localedef -i {where} -f {charmap} {LOCALE_DIR}/{where}.{charmap} || "
        f"test -f {LOCALE_DIR}/{where}.{charmap}/LC_CTYPE)"
        for where, charmap in locales
    ]


def unbuildable_lines(skipped: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c for c in skipped if not _LOCALE_LINE.search(c))


def system_metadata(recipe: Recipe) -> dict[str, list[str]]:
    """A task's metadata about its recipe's system lines: those left out (``recipe_skipped``) and those with no
    rootless equivalent (``recipe_unbuildable``: the row still loads, an image can serve it, and ``swebox
    cache build`` refuses its recipe with :func:`unbuildable_error`)."""
    out = {
        "recipe_skipped": list(recipe.skipped),
        "recipe_unbuildable": list(recipe.unbuildable),
        "recipe_conda_only": list(recipe.conda_only),
    }
    return {k: v for k, v in out.items() if v}


def conda_only_error(instance_id: str, conda_only: list[str], test_ids: list[str]) -> str:
    """Why ``cache build`` refuses a row whose graded tests exercise a package its recipe leaves out ('' when
    none does): built without it, those tests skip where the harness ran them, and the verdict would differ."""
    hits = [t for t in test_ids if any(name in t.lower() for name in conda_only)]
    if not hits:
        return ""
    names = sorted(name for name in conda_only if any(name in t.lower() for t in hits))
    return (
        f"task {instance_id}: expected graded tests that need no conda-only package; found {len(hits)} "
        f"naming {', '.join(names)} (e.g. {hits[0]}), which pip cannot install. Use the row's SWE-bench image "
        f"(swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest) with `swebox cache build "
        f"--env-source image` (docs/cache.md)"
    )


def unbuildable_error(instance_id: str, lines: list[str], image: str = "") -> str:
    """Why ``cache build`` cannot build a row's env from its recipe, and how to get the environment
    (``image``: the one the row names, as SWE-smith's and R2E-Gym's rows do)."""
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    if image:
        use = f"its image {image}: `swebox cache build --tasks ROWS --env-source image` (docs/cache.md)"
    else:
        swebench = f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest"
        use = (
            f"its image: set the row's metadata.image (for SWE-bench, {swebench}) and run `swebox cache build "
            f"--tasks ROWS --env-source image` (docs/cache.md)"
        )
    return (
        f"task {instance_id}: its recipe runs {lines[0]!r}{more}, which installs system packages a "
        f"rootless build cannot install; building without them would give the row another environment. "
        f"Use {use}."
    )
