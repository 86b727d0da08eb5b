"""Procedural bug candidates for JavaScript modules: sites found by acorn under node, applied here.

``js_mutations(files, tools)`` runs ``js_sites.js`` once over every mutable module (one node process) and
returns one :class:`JsMutation` per site, with the same interface as the Python ones
(``technique``, ``candidate()``), so the synthesis pipeline validates both alike. The parser is acorn, pinned
(:data:`ACORN`): the ECMAScript parser of webpack, rollup and eslint's espree, maintained, dependency-free
and exact about source offsets; a regex cannot tell an operator from the same characters in a string,
comment or regex literal. Sites are only inside functions (module-level code runs for every test).
Candidates that do not parse again (acorn, ``node --check``) are dropped by ``candidate()`` returning None.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from swebox.envs.tasks.synth.mutations import SKIPPED_DIRS, Candidate
from swebox.envs.tasks.synth.npm import NpmError

ACORN = "acorn@8.19.0"
"""The pinned parser (npm package@version) the sites come from."""
SCRIPT = Path(__file__).with_name("js_sites.js")
SUFFIXES = (".js", ".cjs", ".mjs")
_TEST_NAME = (".test.", ".spec.", "_test.", "-test.")


def is_mutable_js(rel: str) -> bool:
    """True for a repository-relative JavaScript module that may receive bugs (no tests, builds, configs,
    minified bundles, dot-folders or node_modules)."""
    path = PurePosixPath(rel)
    if path.suffix not in SUFFIXES or path.name.startswith(".") or ".min." in path.name:
        return False
    if any(part in path.name for part in _TEST_NAME) or path.name.endswith(".config.js"):
        return False
    return not any(
        part in SKIPPED_DIRS or part in ("__tests__", "spec", "dist", "coverage") or part.startswith(".")
        for part in path.parts[:-1]
    )


def acorn_path(tools: str | Path) -> Path:
    """The pinned acorn under ``tools`` (``npm install --prefix``, once: the registry is needed then only)."""
    prefix = Path(tools) / ACORN.replace("@", "-")
    module = prefix / "node_modules" / "acorn"
    if not (prefix / ".complete").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--ignore-scripts", ACORN],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not module.is_dir():
            raise NpmError(
                f"installing the JavaScript parser {ACORN}: expected npm to install it; found exit "
                f"{done.returncode}: {done.stderr.strip()[-300:]}. Check that the registry is reachable."
            )
        (prefix / ".complete").write_text(ACORN + "\n")
    return module


@dataclasses.dataclass(frozen=True)
class JsMutation:
    """One site: replace ``source[start:end]`` (UTF-16 offsets, as JavaScript counts) with ``replacement``."""

    technique: str
    path: str
    source: str
    start: int
    end: int
    replacement: str
    qualname: str
    line: int
    end_line: int

    def candidate(self) -> Candidate | None:
        """The mutated module, or None when it changes nothing or no longer parses."""
        units = self.source.encode("utf-16-le")
        new = (units[: 2 * self.start] + self.replacement.encode("utf-16-le") + units[2 * self.end :]).decode(
            "utf-16-le"
        )
        if new == self.source or not _parses(new):
            return None
        return Candidate(self.technique, self.path, self.qualname, self.line, self.end_line, new)


def _parses(source: str) -> bool:
    """``node --check`` on the text: a candidate must load, so a failing test means a bug, not a typo."""
    done = subprocess.run(["node", "--check", "-"], input=source, capture_output=True, text=True, timeout=60)
    # node --check reads stdin as CommonJS; an ES module's import/export fails that way but parsed with acorn
    return done.returncode == 0 or "Cannot use import statement" in done.stderr or "export" in done.stderr


def js_mutations(files: Mapping[str, str], tools: str | Path) -> list[JsMutation]:
    """Every site of the mutable ``files`` (path -> source); files acorn cannot parse are skipped."""
    chosen = {p: s for p, s in files.items() if is_mutable_js(p)}
    if not chosen:
        return []
    request = json.dumps({"acorn": str(acorn_path(tools)), "files": chosen})
    done = subprocess.run(
        ["node", str(SCRIPT)],
        input=request,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NODE_OPTIONS": ""},
    )
    if done.returncode != 0:
        raise RuntimeError(f"js_sites.js failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    answer = json.loads(done.stdout)
    return list(_mutations(answer["sites"], chosen))


def _mutations(sites: Iterable[dict], files: Mapping[str, str]) -> Iterable[JsMutation]:
    for s in sites:
        yield JsMutation(
            s["technique"],
            s["path"],
            files[s["path"]],
            int(s["start"]),
            int(s["end"]),
            s["replacement"],
            s["qualname"],
            int(s["line"]),
            int(s["end_line"]),
        )
