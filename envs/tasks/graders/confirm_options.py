"""Which of the log run's pytest options the confirmation rerun carries (:mod:`.log_confirm`, step 4).

Why. The confirmation can only take a reward away, so its risk is a false 0: an honest gold patch whose tests
pass in the log run, where the repository's ini ``addopts`` and ``test_cmd``'s own options are active, but fail
under the runner because an option that changes outcomes was left out (``-p pytester``, ``-W error::...``,
``-o`` ini overrides, ``--import-mode``, ``--ds=...``, ``-p no:...``, a plugin's options). So the rerun carries
what the log run had, minus what only shapes the log or would fight the runner:

- **test_cmd's options** (the record's, fixed before any agent acts) when test_cmd is a pytest command
  (``pytest ...``, ``py.test ...``, ``<python> -m pytest ...``); a command of another shape (``tox ... --``,
  ``a && b``, ``VAR=x pytest``) carries only the ini's addopts: its pytest options are not in its own words.
- **the ini's addopts as the record has them**, never the agent's: read before the diff is applied (the
  base commit's file; after ``test_patch`` when test_patch writes that file, as the log run reads it), from
  the file pytest itself would choose at /testbed, the rerun's rootdir (:func:`ini_addopts`). A diff's sections
  on config files are dropped by the diff filter in both runs anyway (``diffs.TEST_CONFIG_FILES``), and the
  runner still passes ``-o addopts=``, so nothing else reaches the rerun as addopts; a ``-o addopts=...`` in
  test_cmd replaces the ini's value, as it does in the log run.

Dropped (:func:`carried`): positional arguments (the test directives: the rerun names its own files),
options that only shape the log (``-r``, ``-v``, ``-q``, ``--tb``, ``--color``, ``--no-header``,
``--durations``, ``-o console_output_style=...``, ...), the runner's own (``--junitxml``, ``--rootdir``,
``-c``, the cache provider and what needs it, ``-o junit_*``/``cache_dir``, ``--runxfail``:
:data:`RUNNER_OWNED`), test selection (``-k``, ``-m``, ``--deselect``, ``--ignore``: they only remove tests,
the F2P and P2P tests were selected in the log run by definition, and the runner's canaries must not be
removed), early stops (``-x``, ``--maxfail``: the rerun runs other tests of the files too) and execution
shapes that the runner does not host (xdist's ``-n``/``--dist``, ``--forked``, coverage's ``--cov...``).
Everything else is carried, before the runner's hardening, so the runner's own options win where pytest
keeps the last.
"""

from __future__ import annotations

import configparser
import os
import shlex

import tomllib
from swebox.envs.sandbox import Sandbox, SandboxError


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


INI_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
"""pytest's config files in the order it tries them in a folder (the first that has its section wins;
``pytest.toml`` since pytest 9.0, ``pyproject.toml`` since 6.0)."""
MAX_INI_BYTES = 1 << 20
SHELL_WORDS = frozenset({"&&", "||", ";", "|", "&", ">", ">>", "<", "2>&1"})
"""Tokens that make test_cmd more than one pytest command: its options are then not read."""
VALUE_SHORT = frozenset("kmpoWcrn")
"""Short options whose value follows (attached, ``-rA``, or as the next word, ``-p pytester``)."""
KNOWN_FLAGS = _words(
    "--verbose --quiet --no-header --no-summary --showlocals --full-trace --disable-warnings "
    "--disable-pytest-warnings --exitfirst --runxfail --strict --strict-markers --strict-config --pyargs "
    "--noconftest --keep-duplicates --collect-only --co --doctest-modules --doctest-rst --doctest-plus "
    "--doctest-continue-on-failure --doctest-ignore-import-errors --setup-show --forked --no-cov --lf "
    "--ff --nf --sw --stepwise --stepwise-skip --last-failed --failed-first --new-first --cache-clear "
    "--remote-data --mpl --runslow --run-slow"
)
"""Long options known to take no value: a word after one of them is positional. Any other long option
written without ``=`` is taken to have its value in the next word (``--tb short``, ``--ds proj.settings``):
a directive kept by mistake only names a file the rerun runs anyway, a value dropped by mistake would break
the option."""
LOG_ONLY = _words(
    "-r -v -q -l --verbose --quiet --verbosity --tb --color --code-highlight --no-header --no-summary "
    "--showlocals --full-trace --durations --durations-min --show-capture --disable-warnings "
    "--disable-pytest-warnings --pastebin --setup-show"
)
"""Options that only shape what pytest prints: the runner prints and reads its own."""
RUNNER_OWNED = _words(
    "--junitxml --junit-xml --junit-prefix --rootdir -c --config-file --cache-clear --lf --ff --nf --sw "
    "--stepwise --stepwise-skip --last-failed --failed-first --new-first --runxfail"
)
"""Options the runner sets itself, that need its disabled cache provider, or that its watchdog reads as
tampering: ``--runxfail`` replaces ``pytest.xfail`` (the rerun would be 'failed: replaced: pytest.xfail'); left
out, an xfail test the log failed under it is one the confirmation does not ask about, and one the log passed
passes or xfails here, both accepted."""
SELECTION = _words("-k -m --deselect --ignore --ignore-glob -x --exitfirst --maxfail")
"""Options that only remove tests or stop early (see the module's docstring)."""
EXECUTION = _words("-n --numprocesses --maxprocesses --dist --tx --rsyncdir --forked")
"""Options that run the tests elsewhere (xdist, forked): the runner watches one process."""
OWNED_PLUGINS = frozenset({"cacheprovider", "junitxml", "terminal"})
"""Plugins whose ``-p`` (or ``-p no:``) the runner decides."""
OWNED_INI = ("junit_", "cache_dir", "console_output_style", "addopts")
"""``-o`` keys the runner decides or that only shape the log (addopts: see :func:`addopts_override`)."""


def pytest_words(test_cmd: str) -> list[str] | None:
    """The words after ``pytest`` in test_cmd when it is one pytest command, else None."""
    try:
        argv = shlex.split(test_cmd)
    except ValueError:
        return None
    if not argv or SHELL_WORDS.intersection(argv):
        return None
    head = os.path.basename(argv[0])
    if head in ("pytest", "py.test"):
        return argv[1:]
    if head.startswith("python") and argv[1:3] == ["-m", "pytest"]:
        return argv[3:]
    return None


def _split(words: list[str]) -> list[tuple[str, str | None, list[str]]]:
    """Each option as (name, value or None, its words as written); positional words as ('', None, [word])."""
    out: list[tuple[str, str | None, list[str]]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":  # what follows is positional
            out += [("", None, [w]) for w in words[i:]]
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                out.append((name, value, [word]))
            elif i < len(words) and not words[i].startswith("-") and name not in KNOWN_FLAGS:
                out.append((name, words[i], [word, words[i]]))  # not a known flag: the word is its value
                i += 1
            else:
                out.append((name, None, [word]))
        elif word.startswith("-") and len(word) > 1:
            for j, letter in enumerate(word[1:], start=1):
                if letter in VALUE_SHORT:
                    if j + 1 < len(word):
                        out.append((f"-{letter}", word[j + 1 :], [f"-{letter}", word[j + 1 :]]))
                    elif i < len(words):
                        out.append((f"-{letter}", words[i], [f"-{letter}", words[i]]))
                        i += 1
                    else:
                        out.append((f"-{letter}", None, [f"-{letter}"]))
                    break
                out.append((f"-{letter}", None, [f"-{letter}"]))
        else:
            out.append(("", None, [word]))
    return out


def _dropped(name: str, value: str | None) -> bool:
    if not name or name in LOG_ONLY or name in RUNNER_OWNED or name in SELECTION or name in EXECUTION:
        return True
    if name.startswith("--cov"):
        return True
    if name == "-p" and value is not None:
        return value.removeprefix("no:") in OWNED_PLUGINS
    if name in ("-o", "--override-ini") and value is not None:
        return value.partition("=")[0].strip().startswith(OWNED_INI)
    return False


def carried(words: list[str]) -> list[str]:
    """``words`` (pytest's arguments) less what the rerun drops (the module's docstring), as written."""
    return [w for name, value, written in _split(words) if not _dropped(name, value) for w in written]


def addopts_override(words: list[str]) -> str | None:
    """The value of the last ``-o addopts=...`` in ``words`` (it replaces the ini's addopts), else None."""
    found = None
    for name, value, _ in _split(words):
        if name in ("-o", "--override-ini") and value is not None and value.partition("=")[0].strip() == "addopts":
            found = value.partition("=")[2]
    return found


def ini_addopts(files: dict[str, str]) -> str:
    """The addopts of the config file pytest chooses among ``files`` (name -> text, the ones of /testbed that
    exist), '' when it has none: pytest.toml and pytest.ini always (even empty); pyproject.toml, tox.ini and
    setup.cfg when they have pytest's section."""
    for name in INI_FILES:
        if name not in files:
            continue
        if name.endswith(".toml"):
            section = _toml_section(name, files[name])
            if section is None:
                continue
            value = section.get("addopts", "")
            return " ".join(shlex.quote(str(v)) for v in value) if isinstance(value, list) else str(value)
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            parser.read_string(files[name])
        except configparser.Error:
            continue  # pytest would stop on it; the log run then had no tests to reward
        wanted = "tool:pytest" if name == "setup.cfg" else "pytest"
        if parser.has_section(wanted):
            return " ".join(parser.get(wanted, "addopts", fallback="").split("\n")).strip()
        if name in ("pytest.ini", ".pytest.ini"):
            return ""  # a pytest.ini is pytest's config file even without its section
    return ""


def _toml_section(name: str, text: str) -> dict | None:
    """pytest's table of a TOML config file: ``[pytest]`` of pytest.toml ({} when absent: the file still
    wins), ``[tool.pytest.ini_options]`` or pytest 9's ``[tool.pytest]`` of pyproject.toml; None: not pytest's."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    if name != "pyproject.toml":
        table = data.get("pytest", {})
        return table if isinstance(table, dict) else {}
    tool = data.get("tool", {}).get("pytest")
    if not isinstance(tool, dict):
        return None
    legacy = tool.get("ini_options")
    return legacy if isinstance(legacy, dict) else tool


def rerun_options(test_cmd: str, ini_files: dict[str, str]) -> list[str]:
    """The options the confirmation carries: the record's addopts (test_cmd's ``-o addopts=`` if it has one,
    else the ini's) then test_cmd's own, both less what :func:`carried` drops. A test_cmd that is no single
    pytest command (``tox ... --``) carries the ini's addopts only: the pytest it starts reads that ini."""
    words = pytest_words(test_cmd) or []
    override = addopts_override(words)
    addopts = ini_addopts(ini_files) if override is None else override
    try:
        first = shlex.split(addopts)
    except ValueError:
        first = []  # pytest stops on such an addopts; the log run then had no tests to reward
    return [*carried(first), *carried(words)]


def read_ini_files(sb: Sandbox, names: tuple[str, ...] = INI_FILES) -> dict[str, str]:
    """The config files among ``names`` at /testbed, read by the host (no code of the sandbox runs); a missing
    one, or one that is no regular file or no text, is left out (pytest would not read it as config either)."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = sb.read_file(f"/testbed/{name}", max_bytes=MAX_INI_BYTES).decode("utf-8")
        except (OSError, SandboxError, UnicodeError):
            continue
    return found
