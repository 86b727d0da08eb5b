"""Static reachability: which test files can run a module."""

from __future__ import annotations

from swebox.envs.tasks.synth.reach import Reach, closure, import_graph, imported_names, module_names


def test_module_names_plain_and_src_layout():
    assert module_names("pkg/core.py") == ["pkg.core"]
    assert module_names("pkg/__init__.py") == ["pkg"]
    assert module_names("src/pkg/core.py") == ["src.pkg.core", "pkg.core"]


def test_imported_names_resolve_relative_imports():
    source = "import os\nfrom . import util\nfrom .sub.x import y\nfrom .. import top\n"
    assert imported_names(source, "pkg/inner/core.py") == {
        "os",
        "pkg.inner",
        "pkg.inner.util",
        "pkg.inner.sub.x",
        "pkg.inner.sub.x.y",
        "pkg",
        "pkg.top",
    }
    assert imported_names("from . import a\n", "pkg/__init__.py") == {"pkg", "pkg.a"}
    assert imported_names("def (:\n", "x.py") == set()


def test_graph_includes_parent_packages_and_closure_is_transitive():
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "",
        "tests/test_a.py": "import pkg.a\n",
    }
    graph = import_graph(files)
    assert graph["tests/test_a.py"] == {"pkg/__init__.py", "pkg/a.py"}
    assert closure("tests/test_a.py", graph) == {"tests/test_a.py", "pkg/__init__.py", "pkg/a.py", "pkg/b.py"}


def test_reach_selects_test_files_and_falls_back_to_all():
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "",
        "pkg/b.py": "",
        "pkg/dynamic.py": "",
        "tests/conftest.py": "import pkg.b\n",
        "tests/test_a.py": "from pkg.a import f\n",
        "tests/sub/test_b.py": "",
        "other/test_c.py": "import pkg.a\n",
    }
    reach = Reach(files, files.__getitem__, ["tests"])
    assert reach.test_files == ["tests/sub/test_b.py", "tests/test_a.py"]
    assert reach.tests_for("pkg/a.py") == ["tests/test_a.py"]
    # conftest.py lends its imports to every test file below it
    assert reach.tests_for("pkg/b.py") == ["tests/sub/test_b.py", "tests/test_a.py"]
    # a module no test imports statically gets every test file
    assert reach.tests_for("pkg/dynamic.py") == ["tests/sub/test_b.py", "tests/test_a.py"]
