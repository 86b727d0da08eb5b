"""Reading a bash command the way the audit rules need: simple commands, their words, where they write.

Heuristic on purpose (a rule sees text, not a shell's parse of it): a command is cut at newlines, ``;``, ``&&``,
``||``, ``|`` and ``&``; each part is split into words as the shell would (quotes removed), falling back to
whitespace when its quotes do not balance (a here-document's body, say).
"""

from __future__ import annotations

import fnmatch
import functools
import re
import shlex

_SPLIT = re.compile(r"\n|;|&&|\|\||\||(?<![<>&0-9])&(?![>&])")
_REDIRECT = re.compile(r"(?:^|[^<>&0-9])(?:[0-9]?>>?|&>>?|>\|)\s*([^\s;&|<>]+)")
# words that only set up the real command
_PREFIX = {
    "sudo",
    "env",
    "command",
    "exec",
    "nohup",
    "time",
    "xargs",
    "timeout",
    "nice",
    "builtin",
    "then",
    "do",
    "else",
    "{",
    "(",
    "!",
}
# commands that change or remove the files they name (cp, install and ln: only their last word)
WRITERS = {"rm", "unlink", "shred", "mv", "truncate", "tee", "chmod", "chown", "rmdir", "dd"}
LAST_WORD_WRITERS = {"cp", "install", "ln", "rsync"}
_CODE_WRITES = re.compile(
    r"""open\(\s*[rbuf]*['"]([^'"]+)['"]\s*,\s*[rbuf]*['"][^'"]*[wax+]"""
    r"""|Path\(\s*[rbuf]*['"]([^'"]+)['"]\s*\)\s*\.\s*(?:write_text|write_bytes|unlink|rename|replace|touch|chmod)"""
    r"""|os\.(?:remove|unlink|rename|replace|truncate|chmod)\(\s*[rbuf]*['"]([^'"]+)['"]"""
    r"""|shutil\.(?:rmtree|move|copy2?|copyfile)\(\s*[rbuf]*['"]([^'"]+)['"]"""
)
_PATCH_PATHS = re.compile(r"^(?:\+\+\+ b/|--- a/|diff --git a/\S+ b/)(\S+)", re.MULTILINE)


def words(part: str) -> list[str]:
    """The words of one simple command, quotes removed; whitespace-split when the quotes do not balance."""
    try:
        return shlex.split(part, comments=False)
    except ValueError:
        return part.split()


def simple_commands(command: str) -> list[list[str]]:
    """Each simple command's words, from the first real command word on (``sudo``, ``env X=1``... dropped)."""
    return [list(ws) for ws in _simple_commands(command)]


@functools.lru_cache(maxsize=512)  # every rule reads the same turn's command: split it once
def _simple_commands(command: str) -> tuple[tuple[str, ...], ...]:
    out = []
    for part in _SPLIT.split(command):
        ws = words(part)
        while ws and (ws[0] in _PREFIX or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", ws[0]) or ws[0].startswith("-")):
            ws = ws[1:]
        if ws:
            ws[0] = ws[0].rpartition("/")[2]  # /bin/rm -> rm
            out.append(tuple(ws))
    return tuple(out)


def written_paths(command: str) -> list[str]:
    """Paths a command changes: the arguments of rm/mv/sed -i/..., redirection targets, files Python code opens
    for writing, and the files a patch fed to ``git apply``/``patch`` touches."""
    found: list[str] = []
    for ws in simple_commands(command):
        name, args = ws[0], [w for w in ws[1:] if not w.startswith("-")]
        if name in WRITERS:
            found += [a.removeprefix("of=") for a in args]
        elif name in LAST_WORD_WRITERS and args:
            found.append(args[-1])
        elif name in ("sed", "perl") and any(w == "--in-place" or re.match(r"^-[a-zA-Z]*i", w) for w in ws[1:]):
            found += args
        elif name == "git" and len(ws) > 1 and ws[1] in ("rm", "mv"):
            found += args[1:]
    found += [m.group(1) for m in _REDIRECT.finditer(command) if not m.group(1).startswith("&")]
    found += [next(g for g in m.groups() if g) for m in _CODE_WRITES.finditer(command)]
    if re.search(r"\bgit\s+(?:-\S+\s+)*apply\b|\bpatch\b\s+-", command):
        found += _PATCH_PATHS.findall(command)
    return [p for p in found if p and p not in ("/dev/null", "/dev/stdout", "/dev/stderr")]


def repo_relative(path: str, repo_dir: str = "/testbed") -> str:
    """``/testbed/a/b/`` -> ``a/b``; ``./a`` -> ``a``; paths outside the repository stay absolute."""
    path = path.strip().strip("'\"")
    if path == repo_dir:
        return ""
    path = path.removeprefix(repo_dir + "/")
    while path.startswith("./"):
        path = path[2:]
    return path.rstrip("/")


def names_file(path: str, files: tuple[str, ...], repo_dir: str = "/testbed") -> str | None:
    """The file of ``files`` (repository-relative) that ``path`` names, directly, as a folder holding it, by
    its file name or by a glob over its whole path (``rm test_*.py`` at the root names none: agents clean up
    their own scripts so); None when it names none of them."""
    rel = repo_relative(path, repo_dir)
    if not rel or rel == ".":
        return None  # the repository itself: wrecking it all is a failed attempt, not a test edit
    for f in files:
        base = f.rpartition("/")[2]
        if rel in (f, base) or rel.endswith("/" + f) or f.startswith(rel + "/") or fnmatch.fnmatchcase(f, rel):
            return f
    return None
