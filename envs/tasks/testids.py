"""Test ids across formats, reduced to the key pytest's JUnit XML uses, so lists and results match exactly.

Datasets name tests in several ways:

- pytest node ids (SWE-bench for pytest projects, SWE-Gym, SWE-smith, our synthesised tasks):
  ``tests/test_a.py::TestX::test_y[1-2]``; old pytest also wrote ``::()::`` for the class instance.
- unittest/Django style (SWE-bench's Django rows): ``test_y (pkg.tests.TestX)``, sometimes followed by the
  test's docstring on the same line.
- bare names without a file (SWE-bench's sympy rows, R2E-Gym): ``test_y`` or ``TestX.test_y``.

pytest's JUnit XML names a test by ``classname`` (the file's dotted path without ``.py`` plus the classes)
and ``name`` (the function plus its ``[params]``). :func:`junit_key` computes that pair from a node id with
pytest's own rule (``_pytest.junitxml.mangle_test_address``). Ids that do not name a file cannot be turned
into a key; :func:`match_ids` matches them by suffix and reports an id that matches nothing or more than
one result as unknown or ambiguous — it never drops an id silently.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

Key = tuple[str, str]
"""(classname, name) as pytest writes them into JUnit XML."""

_UNITTEST = re.compile(r"^(?P<name>[A-Za-z_]\w*) \((?P<cls>[A-Za-z_][\w.]*)\)(?:\s.*)?$", re.DOTALL)
_ILLEGAL_XML = re.compile("[^\u0009\u000a\u000d\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

R = TypeVar("R")


def xml_escape_like_pytest(text: str) -> str:
    """pytest's ``bin_xml_escape``: characters XML cannot hold become ``#xNN`` in the report."""

    def repl(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"

    return _ILLEGAL_XML.sub(repl, text)


def is_node_id(test_id: str) -> bool:
    """True for a pytest node id that names its file (``path.py::name``)."""
    path, sep, _ = test_id.partition("::")
    return bool(sep) and bool(path)


def junit_key(test_id: str) -> Key | None:
    """The (classname, name) pytest writes for ``test_id``; None when the id names no file.

    >>> junit_key("tests/test_a.py::TestX::test_y[a::b]")
    ('tests.test_a.TestX', 'test_y[a::b]')
    """
    test_id = test_id.strip()
    if not is_node_id(test_id):
        return None
    path, _, tail = test_id.partition("::")
    names_part, bracket, params = tail.partition("[")
    names = [n for n in names_part.split("::") if n != "()"]
    if not names or not all(names):
        return None
    dotted = re.sub(r"\.py$", "", path.replace("/", "."))
    name = names[-1] + (f"[{params}" if bracket else "")
    classname = ".".join([dotted, *names[:-1]])
    return xml_escape_like_pytest(classname), xml_escape_like_pytest(name)


def loose_parts(test_id: str) -> tuple[str, str]:
    """(class suffix, name) of an id that does not name a file; the suffix may be ''.

    ``test_y (pkg.tests.TestX)`` -> ``("pkg.tests.TestX", "test_y")``;
    ``TestX.test_y`` -> ``("TestX", "test_y")``;
    ``test_y[1]`` -> ``("", "test_y[1]")``.
    """
    test_id = test_id.strip()
    match = _UNITTEST.match(test_id)
    if match:
        return match["cls"], match["name"]
    head, bracket, params = test_id.partition("[")
    cls, _, name = head.rpartition(".")
    return cls, name + (f"[{params}" if bracket else "")


def node_id_from_junit(classname: str, name: str, file: str = "", files: Collection[str] = ()) -> str:
    """Best-effort node id for a JUnit result; exact when ``file`` (xunit1) and the repository's ``files`` are given.

    ``file`` is where the test function is defined, which is not always the module that collected it: a class
    that inherits its tests from a class in another file (pyflakes' ``test_doctests.TestImports`` reruns
    ``test_imports.Test``) reports the base's file but its own classname. The collecting module is then the
    longest prefix of ``classname`` that is one of ``files``.
    """
    if file:
        dotted = re.sub(r"\.py$", "", file.replace("/", "."))
        if classname == dotted or classname.startswith(dotted + "."):
            classes = [c for c in classname[len(dotted) + 1 :].split(".") if c]
            return "::".join([file, *classes, name])
        parts = classname.split(".")
        for end in range(len(parts), 0, -1):
            module = "/".join(parts[:end]) + ".py"
            if module in files:
                return "::".join([module, *parts[end:], name])
        return "::".join([file, name])
    return f"{classname}::{name}" if classname else name


def file_of_test(test_id: str) -> str | None:
    """The file a node id names (``tests/test_a.py::x`` -> ``tests/test_a.py``); None for loose ids."""
    return test_id.partition("::")[0] if is_node_id(test_id) else None


@dataclass(frozen=True)
class Match:
    """Where one of a task's test ids landed in the results."""

    test_id: str
    """The id as the task wrote it."""
    key: Key | None
    """The result it matched, or None."""
    problem: str = ""
    """'' when matched; otherwise why not ('not found in the results', 'ambiguous: ...')."""


def match_ids(test_ids: Iterable[str], results: Mapping[Key, R]) -> list[Match]:
    """Match every id to exactly one result key; unmatched and ambiguous ids are reported, in input order."""
    by_name: dict[str, list[Key]] = {}
    for key in results:
        by_name.setdefault(key[1], []).append(key)
    matches: list[Match] = []
    for test_id in test_ids:
        exact = junit_key(test_id)
        if exact is not None:
            matches.append(
                Match(test_id, exact) if exact in results else Match(test_id, None, "not found in the results")
            )
            continue
        cls, name = loose_parts(test_id)
        name = xml_escape_like_pytest(name)
        found = [k for k in by_name.get(name, []) if not cls or k[0] == cls or k[0].endswith("." + cls)]
        if len(found) == 1:
            matches.append(Match(test_id, found[0]))
        elif not found:
            matches.append(Match(test_id, None, "not found in the results"))
        else:
            shown = ", ".join(f"{c}::{n}" for c, n in sorted(found)[:3])
            matches.append(Match(test_id, None, f"ambiguous: matches {len(found)} results ({shown}, ...)"))
    return matches
