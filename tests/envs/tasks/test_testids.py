"""Test ids: every format a dataset uses maps onto the key pytest writes into JUnit XML."""

from __future__ import annotations

import subprocess
import sys

from swebox.envs.tasks.graders.junit import parse_junit
from swebox.envs.tasks.testids import (
    file_of_test,
    junit_key,
    loose_parts,
    match_ids,
    node_id_from_junit,
    xml_escape_like_pytest,
)


def test_junit_key_follows_pytests_mangling():
    assert junit_key("tests/test_a.py::test_x") == ("tests.test_a", "test_x")
    assert junit_key("tests/test_a.py::TestX::test_y[1-2]") == ("tests.test_a.TestX", "test_y[1-2]")
    # '::' and '/' inside the params belong to the name, not to the path or the classes.
    assert junit_key("t/test_a.py::test_p[a::b/c]") == ("t.test_a", "test_p[a::b/c]")
    # old pytest wrote '::()::' for the class instance
    assert junit_key("test_a.py::TestX::()::test_y") == ("test_a.TestX", "test_y")
    assert junit_key("test_y") is None
    assert junit_key("test_y (pkg.tests.TestX)") is None


def test_loose_forms():
    assert loose_parts("test_y (pkg.tests.TestX)") == ("pkg.tests.TestX", "test_y")
    assert loose_parts("test_y (pkg.tests.TestX)\nA docstring line") == ("pkg.tests.TestX", "test_y")
    assert loose_parts("TestX.test_y[1.5]") == ("TestX", "test_y[1.5]")
    assert loose_parts("test_y") == ("", "test_y")


def test_xml_escape_matches_pytest():
    from _pytest.junitxml import bin_xml_escape

    for text in ["plain", "tab\there", "bell\x07", "\x1b[31mred", "nul\x00", "ok\u00e9"]:
        assert xml_escape_like_pytest(text) == str(bin_xml_escape(text))


def test_file_of_test():
    assert file_of_test("tests/test_a.py::TestX::test_y") == "tests/test_a.py"
    assert file_of_test("TestX.test_y") is None


def test_node_id_from_junit_with_file():
    assert (
        node_id_from_junit("tests.test_a.TestX", "test_y[1]", "tests/test_a.py") == "tests/test_a.py::TestX::test_y[1]"
    )
    assert node_id_from_junit("tests.test_a", "test_x", "tests/test_a.py") == "tests/test_a.py::test_x"


def test_node_id_from_junit_of_an_inherited_test_names_the_collecting_module():
    # JUnit's file is where the method is written; the classname is the subclass in another module
    files = {"pkg/test/test_imports.py", "pkg/test/test_doctests.py"}
    node = node_id_from_junit("pkg.test.test_doctests.TestImports", "test_x", "pkg/test/test_imports.py", files)
    assert node == "pkg/test/test_doctests.py::TestImports::test_x"
    assert junit_key(node) == ("pkg.test.test_doctests.TestImports", "test_x")
    # without the repository's files the id cannot be exact; it never invents a module
    assert node_id_from_junit("pkg.test.test_doctests.TestImports", "test_x", "pkg/test/test_imports.py") == (
        "pkg/test/test_imports.py::test_x"
    )


def test_match_reports_unknown_and_ambiguous_ids_in_order():
    results = {
        ("tests.test_a.TestX", "test_y"): 1,
        ("tests.test_b.TestX", "test_y"): 2,
        ("tests.test_b", "test_z[1]"): 3,
    }
    out = match_ids(
        [
            "tests/test_a.py::TestX::test_y",
            "tests/test_a.py::gone",
            "TestX.test_y",
            "test_z[1]",
            "test_y (tests.test_b.TestX)",
            "nothing",
        ],
        results,
    )
    assert [m.key for m in out] == [
        ("tests.test_a.TestX", "test_y"),
        None,
        None,
        ("tests.test_b", "test_z[1]"),
        ("tests.test_b.TestX", "test_y"),
        None,
    ]
    assert out[1].problem == "not found in the results"
    assert out[2].problem.startswith("ambiguous: matches 2 results")
    assert out[5].problem == "not found in the results"


def test_keys_match_a_real_pytest_junit_file(tmp_path):
    """Run pytest on a file with classes, params with odd characters, and check every node id matches."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "test_odd.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('v', ['a::b', 'x/y', 'sp ace', '\\x07bell', 'é'])\n"
        "def test_p(v):\n    assert v\n"
        "class TestK:\n    def test_m(self):\n        pass\n"
        "    class TestInner:\n        def test_n(self):\n            assert False\n"
    )
    junit = tmp_path / "out.xml"
    ids = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "pkg"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    ).stdout
    node_ids = [line for line in ids.splitlines() if "::" in line]
    assert len(node_ids) == 7
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "pkg"],
        cwd=tmp_path,
        capture_output=True,
    )
    report = parse_junit(junit.read_bytes())
    matches = match_ids(node_ids, report.results)
    assert [m.problem for m in matches] == [""] * 7
    assert {m.key for m in matches} == set(report.results)
    assert report.results[junit_key("pkg/test_odd.py::TestK::TestInner::test_n")].status == "failed"
