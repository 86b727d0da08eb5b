"""SWE-bench's own harness facts (log parsers, test directives), read from the ``swebench`` package at run time.

swebox grades SWE-bench-family rows with the official parsers rather than its own copies, so a verdict is the
one the official harness would give. The package is pinned to 4.1.0: it is the last release with the
per-repo/version spec table and ``harness/test_spec`` (``get_test_directives``); 5.x (checked: 5.0.2) moved
specs into per-instance scripts and keeps only the log parsers (docs/datasets.md says what they fix).

``import swebench`` runs a package ``__init__`` that imports the Docker, Modal and GitHub clients; none of
them is needed to parse a log. So the two aggregating ``__init__`` modules (``swebench`` and
``swebench.harness``) are replaced by empty package modules pointing at the same folders before the leaf
modules are imported; every module that runs is swebench's own. This needs only
``pip install --no-deps swebench==4.1.0 unidiff python-dotenv`` plus ``requests`` and ``datasets`` (imported
by ``swebench.harness.utils``). A full ``pip install swebench==4.1.0`` works too.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types

PINNED = "4.1.0"
INSTALL = f"pip install --no-deps swebench=={PINNED} unidiff python-dotenv requests datasets"


class HarnessUnavailable(RuntimeError):
    """The ``swebench`` package is missing, of another version, or cannot be imported."""


def installed_version() -> str | None:
    """The installed swebench version, or None."""
    try:
        return importlib.metadata.version("swebench")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def module(name: str) -> types.ModuleType:
    """``swebench.<name>`` (e.g. 'harness.log_parsers.python'), imported without the heavy package inits."""
    version = installed_version()
    if version != PINNED:
        found = f"version {version}" if version else "no swebench package"
        raise HarnessUnavailable(
            f"grader='log' reads SWE-bench's log parsers from swebench=={PINNED}; found {found}. "
            f"Install it with `{INSTALL}` (see docs/tasks.md, 'Log graders')."
        )
    if "swebench" not in sys.modules:  # a process that imported the real package keeps it
        spec = importlib.util.find_spec("swebench")
        assert spec is not None  # installed_version() found the package above
        root = list(spec.submodule_search_locations or [])[0]
        for pkg, sub in (("swebench", ""), ("swebench.harness", "/harness")):
            stub = types.ModuleType(pkg)
            stub.__path__ = [root + sub]
            # a spec like the real package's, so that find_spec (the recipes' reader) still finds its folder
            stub.__spec__ = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
            stub.__spec__.submodule_search_locations = stub.__path__
            sys.modules[pkg] = stub
    try:
        return importlib.import_module(f"swebench.{name}")
    except ImportError as exc:
        raise HarnessUnavailable(
            f"swebench.{name} could not be imported ({exc}); install what it needs with `{INSTALL}`."
        ) from exc


def python_parsers() -> dict:
    """SWE-bench's ``MAP_REPO_TO_PARSER_PY``: repo ('owner/name') -> log parser function."""
    return module("harness.log_parsers.python").MAP_REPO_TO_PARSER_PY


def javascript_parsers() -> dict:
    """SWE-bench's ``MAP_REPO_TO_PARSER_JS``: repo ('owner/name') -> log parser function (SWE-bench
    Multilingual's JavaScript/TypeScript repositories)."""
    return module("harness.log_parsers.javascript").MAP_REPO_TO_PARSER_JS


def javascript_specs() -> dict:
    """SWE-bench's ``MAP_REPO_VERSION_TO_SPECS_JS``: repo -> version -> spec (its ``test_cmd`` a string or a list)."""
    return module("harness.constants.javascript").MAP_REPO_VERSION_TO_SPECS_JS


def get_test_directives(repo: str, test_patch: str) -> list[str]:
    """SWE-bench's ``get_test_directives`` for one instance."""
    return list(module("harness.test_spec.python").get_test_directives({"repo": repo, "test_patch": test_patch}))
