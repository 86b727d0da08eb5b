"""Each mutation technique on hand-written snippets: exactly the expected source, nothing else."""

from __future__ import annotations

import textwrap

import pytest
from swebox.envs.tasks.synth.mutations import (
    TECHNIQUES,
    is_generated,
    is_test_file,
    mutate_source,
    mutations,
    source_files,
)


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def outputs(source: str, technique: str) -> list[str]:
    return [c.source for c in mutate_source(src(source), techniques=[technique])]


def test_change_binary_operator():
    assert outputs("def f(a, b):\n    return a + b\n", "change_binary_operator") == ["def f(a, b):\n    return a - b\n"]


def test_change_augmented_operator():
    assert outputs("def f(a):\n    a += 2\n    return a\n", "change_augmented_operator") == [
        "def f(a):\n    a -= 2\n    return a\n"
    ]


def test_change_boolean_operator():
    assert outputs("def f(a, b):\n    return a and b\n", "change_boolean_operator") == [
        "def f(a, b):\n    return a or b\n"
    ]


def test_change_comparison_operator_each_link_of_a_chain():
    assert outputs("def f(a, b, c):\n    return a < b == c\n", "change_comparison_operator") == [
        "def f(a, b, c):\n    return a <= b == c\n",
        "def f(a, b, c):\n    return a < b != c\n",
    ]


def test_change_comparison_operator_two_word_operators():
    assert outputs("def f(a, b):\n    return a is not b\n", "change_comparison_operator") == [
        "def f(a, b):\n    return a is b\n"
    ]
    assert outputs("def f(a, b):\n    return a in b\n", "change_comparison_operator") == [
        "def f(a, b):\n    return a not in b\n"
    ]


def test_swap_operands_keeps_grouping_with_parentheses():
    assert outputs("def f(a, b, c):\n    return a - b - c\n", "swap_operands") == [
        "def f(a, b, c):\n    return c - (a - b)\n",
        "def f(a, b, c):\n    return b - a - c\n",
    ]
    assert outputs("def f(a, b):\n    return a < b\n", "swap_operands") == ["def f(a, b):\n    return b < a\n"]


def test_swap_operands_skips_commutative_operators():
    assert outputs("def f(a, b):\n    return a * b == b\n", "swap_operands") == []


def test_change_constant_ints_bools_strings():
    assert outputs("def f(x):\n    return x[2]\n", "change_constant") == [
        "def f(x):\n    return x[3]\n",
        "def f(x):\n    return x[1]\n",
    ]
    assert outputs("def f(x):\n    return x[0]\n", "change_constant") == ["def f(x):\n    return x[1]\n"]
    assert outputs("def f():\n    return True\n", "change_constant") == ["def f():\n    return False\n"]
    assert outputs("def f(d):\n    return d['key']\n", "change_constant") == ["def f(d):\n    return d['ke']\n"]
    assert outputs('def f(d):\n    return d.get(b"")\n', "change_constant") == ['def f(d):\n    return d.get(b"x")\n']


def test_change_constant_skips_strings_ending_in_an_escape():
    assert outputs('def f(s):\n    return s.split("\\n")\n', "change_constant") == []


def test_break_chain_comparison_and_arithmetic():
    assert outputs("def f(a, b, c):\n    return a < b < c\n", "break_chain") == ["def f(a, b, c):\n    return a < b\n"]
    assert outputs("def f(a, b, c):\n    return a + b + c\n", "break_chain") == ["def f(a, b, c):\n    return a + c\n"]


def test_invert_if_swaps_branches():
    source = """
    def f(x):
        if x:
            return 1
        else:
            return 2
    """
    assert outputs(source, "invert_if") == [
        src("""
        def f(x):
            if x:
                return 2
            else:
                return 1
        """)
    ]


def test_invert_if_ignores_elif_chains():
    source = """
    def f(x):
        if x:
            return 1
        elif x is None:
            return 2
    """
    assert outputs(source, "invert_if") == []


def test_remove_conditional():
    source = """
    def f(x):
        if x < 0:
            x = 0
        return x
    """
    assert outputs(source, "remove_conditional") == ["def f(x):\n    return x\n"]


def test_remove_loop_leaves_pass_in_an_emptied_body():
    source = """
    def f(xs):
        for x in xs:
            print(x)
    """
    assert outputs(source, "remove_loop") == ["def f(xs):\n    pass\n"]


def test_remove_assignment():
    source = """
    def f(x):
        y = x * 2
        y += 1
        return y
    """
    assert outputs(source, "remove_assignment") == [
        "def f(x):\n    y += 1\n    return y\n",
        "def f(x):\n    y = x * 2\n    return y\n",
    ]


def test_remove_wrapper_keeps_the_body():
    source = """
    def f(path):
        try:
            data = open(path).read()
        except OSError:
            data = ""
        with lock:
            n = len(data)
        return n
    """
    assert outputs(source, "remove_wrapper") == [
        src("""
        def f(path):
            data = open(path).read()
            with lock:
                n = len(data)
            return n
        """),
        src("""
        def f(path):
            try:
                data = open(path).read()
            except OSError:
                data = ""
            n = len(data)
            return n
        """),
    ]


def test_shuffle_statements_keeps_docstring_first_and_is_seeded():
    source = src('''
    def f(x):
        """Doc."""
        a = 1
        b = 2
        return a + b
    ''')
    first = mutate_source(source, techniques=["shuffle_statements"], seed=7)
    again = mutate_source(source, techniques=["shuffle_statements"], seed=7)
    assert [c.source for c in first] == [c.source for c in again]
    (candidate,) = first
    lines = candidate.source.splitlines()
    assert lines[:2] == ["def f(x):", '    """Doc."""']
    assert sorted(lines[2:]) == sorted(["    a = 1", "    b = 2", "    return a + b"])
    assert lines[2:] != ["    a = 1", "    b = 2", "    return a + b"]
    sources = {mutate_source(source, techniques=["shuffle_statements"], seed=s)[0].source for s in range(20)}
    assert len(sources) > 1  # the seed matters


def test_remove_base_class():
    assert outputs("class A(B, C):\n    pass\n", "remove_base_class") == [
        "class A(C):\n    pass\n",
        "class A(B):\n    pass\n",
    ]
    assert outputs("class A(B):\n    pass\n", "remove_base_class") == ["class A:\n    pass\n"]
    assert outputs("class A(object):\n    pass\n", "remove_base_class") == []


def test_remove_method():
    source = """
    class A:
        def f(self):
            return 1

        def g(self):
            return 2
    """
    assert outputs(source, "remove_method") == [
        "class A:\n\n    def g(self):\n        return 2\n",
        "class A:\n    def f(self):\n        return 1\n",
    ]


def test_candidate_metadata_names_function_and_span():
    source = src("""
    class Cache:
        def pop(self, key):
            value = self.data[key]
            if value is None:
                raise KeyError(
                    key,
                )
            return value
    """)
    removal = mutate_source(source, techniques=["remove_assignment", "remove_conditional"])
    assert [(c.qualname, c.start_line, c.end_line, c.technique, c.path) for c in removal] == [
        ("Cache.pop", 3, 3, "remove_assignment", ""),
        ("Cache.pop", 4, 7, "remove_conditional", ""),
    ]


def test_skips_annotations_module_level_docstrings_and_decorators():
    source = src('''
    LIMIT = 3 + 4
    """module string"""


    @decorate(1 + 2)
    def f(x: int | None = None) -> str | None:
        """Docstring."""
        return x
    ''')
    assert mutate_source(source) == []


def test_skips_data_tables():
    items = ", ".join(str(i) for i in range(40))
    assert mutate_source(f"def f():\n    return [{items}]\n", techniques=["change_constant"]) == []


def test_generated_modules_yield_nothing():
    source = "# This file is auto-generated. Do not edit.\ndef f(a, b):\n    return a + b\n"
    assert is_generated(source)
    assert mutate_source(source) == []


def test_deduplicates_identical_outputs():
    # Removing either of two identical assignments produces the same module: listed once.
    source = "def f():\n    x = 1\n    x = 1\n    return x\n"
    assert outputs(source, "remove_assignment") == ["def f():\n    x = 1\n    return x\n"]


def test_every_candidate_compiles_and_differs():
    source = src("""
    class Stack(list):
        def push(self, item, times=1):
            for _ in range(times):
                self.append(item)
            return len(self) > 0 and not self.frozen

        def peek(self):
            try:
                return self[-1]
            except IndexError:
                return None
    """)
    candidates = mutate_source(source, seed=3)
    assert {c.technique for c in candidates} >= {
        "remove_loop",
        "remove_wrapper",
        "remove_method",
        "remove_base_class",
        "change_constant",
        "change_boolean_operator",
        "change_comparison_operator",
        "shuffle_statements",
    }
    assert len({c.source for c in candidates}) == len(candidates)
    for c in candidates:
        assert c.source != source
        compile(c.source, "x", "exec")
        assert c.technique in TECHNIQUES


def test_refuses_test_files_and_unknown_techniques():
    with pytest.raises(ValueError, match="test file"):
        mutations("def f():\n    return 1\n", path="pkg/tests/helpers.py")
    with pytest.raises(ValueError, match="unknown techniques"):
        mutations("def f():\n    return 1\n", techniques=["flip_everything"])
    with pytest.raises(ValueError, match="cannot parse"):
        mutations("def f(:\n")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests/test_core.py", True),
        ("pkg/test/helpers.py", True),
        ("conftest.py", True),
        ("pkg/core_test.py", True),
        ("pkg/test_things.py", True),
        ("pkg/core.py", False),
        ("pkg/testing_utils.py", False),
    ],
)
def test_is_test_file(path, expected):
    assert is_test_file(path) is expected


def test_source_files_skips_tests_docs_and_setup(tmp_path):
    for rel in [
        "pkg/__init__.py",
        "pkg/core.py",
        "pkg/tests/test_core.py",
        "tests/conftest.py",
        "docs/conf.py",
        "setup.py",
        ".venv/lib/x.py",
        "src/other/mod.py",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    assert source_files(tmp_path) == ["pkg/__init__.py", "pkg/core.py", "src/other/mod.py"]
