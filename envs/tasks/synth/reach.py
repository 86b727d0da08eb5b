"""Which test files can reach a module: a static import graph of the repository.

A mutant only needs the tests that can execute the changed module. A test file reaches a module when the
module is in the transitive closure of its imports (importing ``a.b.c`` also runs ``a/__init__.py`` and
``a/b/__init__.py``); a ``conftest.py`` lends its imports to every test file below it. Dynamic imports are
invisible to this, so a module that no test reaches statically gets every test file.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from swebox.envs.tasks.synth.mutations import is_test_file


def module_names(path: str) -> list[str]:
    """Dotted names a file may be imported as: from the root, and from under src/ (src layouts)."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    names = [".".join(parts)] if parts else []
    if len(parts) > 1 and parts[0] in ("src", "lib"):
        names.append(".".join(parts[1:]))
    return names


def imported_names(source: str, path: str) -> set[str]:
    """Every dotted name a module imports (relative imports resolved, ``from a import b`` gives a and a.b)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    package = module_names(path)[-1] if module_names(path) else ""
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(files: dict[str, str]) -> dict[str, set[str]]:
    """file -> files it imports directly (including the parent packages' __init__.py)."""
    by_name: dict[str, str] = {}
    for path in files:
        for name in module_names(path):
            by_name.setdefault(name, path)
    graph: dict[str, set[str]] = {}
    for path, source in files.items():
        targets: set[str] = set()
        for name in imported_names(source, path):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                hit = by_name.get(".".join(parts[:i]))
                if hit and hit != path:
                    targets.add(hit)
        graph[path] = targets
    return graph


def closure(start: str, graph: dict[str, set[str]]) -> set[str]:
    """Every file reachable from ``start`` (itself included)."""
    seen = {start}
    stack = [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


class Reach:
    """Answers 'which test files can run this module' for one repository snapshot."""

    def __init__(self, files: Iterable[str], read: Callable[[str], str], test_roots: Iterable[str]) -> None:
        roots = [r.rstrip("/") for r in test_roots]
        python = [f for f in files if f.endswith(".py")]
        sources = {}
        for f in python:
            try:
                sources[f] = read(f)
            except (OSError, UnicodeDecodeError, ValueError):
                continue
        graph = import_graph(sources)
        self.test_files = sorted(
            f
            for f in sources
            if is_test_file(f)
            and PurePosixPath(f).name != "conftest.py"
            and _under(f, roots)
            and (PurePosixPath(f).name.startswith("test") or PurePosixPath(f).name.endswith("_test.py"))
        )
        conftests = [f for f in sources if PurePosixPath(f).name == "conftest.py"]
        self._reach: dict[str, set[str]] = {}
        for test in self.test_files:
            reached = closure(test, graph)
            for conf in conftests:
                if _under(test, [str(PurePosixPath(conf).parent)]):
                    reached |= closure(conf, graph)
            self._reach[test] = reached

    def tests_for(self, module: str) -> list[str]:
        """Test files whose imports reach ``module``; all test files when none does statically."""
        hits = [t for t in self.test_files if module in self._reach[t]]
        return hits or list(self.test_files)


def _under(path: str, roots: list[str]) -> bool:
    return any(r in ("", ".") or path == r or path.startswith(r + "/") for r in roots)
