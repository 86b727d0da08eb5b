"""An episode's repository state: how its start state is prepared, and how the agent's diff is taken.

The start state is the task's layers plus the task's ``setup_commands`` and, for tasks whose tests are
hidden, the removal of the test files that ``test_patch`` adds (the grader brings them back). Its git tree
(``git add -A && git write-tree``) is the base of the agent's diff, so the preparation never shows up as
the agent's change and a commit made by the agent does not hide its work.

The diff is taken with git inside the episode's sandbox, by host commands (``Sandbox.run``: a fresh process
of the session, never the agent's shell, whose functions, aliases and traps are the agent's), with git's
system and global configuration off and every filter driver the repository's configuration names emptied, so
that no program of the agent runs while the host reads its tree. The agent's processes are held meanwhile: at
the episode's end all are killed first (quiesce), mid-episode (``current_diff``) they are stopped for the
capture's time (freeze), so nothing rewrites the tree, or git's memory, while it is read. The diff comes back on
the command's stdout, never through a file the agent could swap. When the agent broke git (deleted ``.git``,
removed objects, made ``/testbed`` something else), the repository without ``.git`` is packed and compared in a
fresh sandbox over the start layers instead, so the diff never depends on the agent leaving git intact.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass

from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.tasks.graders.diff_parse import parse_diff
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.testids import file_of_test

REPO = "/testbed"
# Host commands run with a fixed environment (hostrun.py); git must not read a configuration the agent wrote
# outside the repository either ($HOME's, /etc's): each capture names a HOME that does not exist.
GIT_ENV = "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_ATTR_NOSYSTEM=1"
GIT = (
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.quotePath=false "
    "-c safe.directory='*' -c advice.addIgnoredFile=false -c core.attributesFile=/dev/null -c gc.auto=0"
)
DIFF = "diff --cached --binary --full-index --no-color --no-ext-diff --no-textconv --no-renames"
_TREE = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def git_command() -> str:
    """git with the agent's configuration outside the repository out of reach (a fresh nonexistent HOME)."""
    nohome = f"/swebox-nohome-{secrets.token_hex(8)}"
    return f"HOME={nohome} XDG_CONFIG_HOME={nohome} {GIT_ENV} {GIT}"


class EpisodeError(RuntimeError):
    """The environment (not the agent) failed: a setup command, the sandbox, the repository's git."""


class DiffUnavailable(RuntimeError):
    """The agent's changes could not be turned into a diff (e.g. it filled the disk or made it too large)."""


@dataclass
class StartState:
    """Where an episode starts: the layers of its sandbox, and what is already prepared in them. Made by
    :func:`swebox.envs.episodes.task_episodes.open_task`, which also holds the layers for as long as episodes use
    them."""

    layers: list
    """Layers of the episode's sandbox, lowest first: the task's, plus a prepared snapshot for a group."""
    grade_layers: list
    """The task's own layers: grading starts a fresh sandbox over them."""
    prepared: bool = False
    """True when ``layers`` already hold the setup commands and the hidden-test removal (group snapshots)."""
    base_tree: str = ""
    """Git tree of the prepared start state; '' until the first preparation computes it."""


def hidden_test_paths(task: Task) -> list[str]:
    """Files that must not be in the start of a task whose tests are hidden: those ``test_patch`` creates
    or, without a test_patch, the FAIL_TO_PASS test files (SWE-smith: they are in the repository, and the
    grader's fresh sandbox over the task's layers has them)."""
    if not task.hidden_tests:
        return []
    if not task.test_patch:
        return list(dict.fromkeys(f for f in (file_of_test(t) for t in task.FAIL_TO_PASS) if f))
    return [p.new_path for p in parse_diff(task.test_patch) if p.old_path is None and p.new_path]


def _run(sb: Sandbox, script: str, timeout: float, what: str) -> str:
    result = sb.run(script, timeout=timeout)
    if not result.ok:
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        said = result.stdout.decode("utf-8", "replace") + result.stderr
        raise EpisodeError(f"{what} failed ({status}): {said[-1500:]}")
    return result.stdout.decode("utf-8", "replace")


def prepare_start(sb: Sandbox, task: Task, timeout: float = 600.0) -> str:
    """Run the task's setup commands and remove hidden tests in ``sb``; returns the start state's git tree."""
    for command in task.setup_commands:
        result = sb.exec(f"cd {REPO} && {command}", timeout=timeout)
        if result.timed_out or result.exit_code != 0:
            raise EpisodeError(
                f"task {task.instance_id}: setup command {command!r} failed "
                f"(exit {result.exit_code}, timed out: {result.timed_out}): {result.output[-1500:]}"
            )
    hidden = hidden_test_paths(task)
    if hidden:
        _run(sb, f"cd {REPO} && rm -f -- " + " ".join(shlex.quote(p) for p in hidden), 60, "removing hidden tests")
    git = git_command()
    out = _run(
        sb,
        f"cd {REPO} && {git} add -A . && {git} write-tree",
        timeout,
        f"task {task.instance_id}: recording the start state with git (the env layer must hold "
        f"{REPO} as a git repository)",
    )
    tree = out.strip().splitlines()[-1] if out.strip() else ""
    if not _TREE.match(tree):
        raise EpisodeError(f"task {task.instance_id}: expected a git tree id from `git write-tree`; found {out!r}")
    return tree


# Every filter driver the repository's configuration names, emptied: a clean filter is a program of the agent's
# that git would run on each file, recording its output instead of the file. Driver names are words (attribute
# values hold no whitespace, so a name with a space names no driver), split with globbing off, never evaluated.
_NO_FILTERS = (
    "set -f; set --; for name in $({git} config --name-only --get-regexp '^filter[.]'); do "
    'driver=${{name%.*}}; set -- "$@" -c "$driver.clean=" -c "$driver.smudge=" -c "$driver.process=" '
    '-c "$driver.required=false"; done; '
)


def git_diff(sb: Sandbox, base_tree: str, max_bytes: int, timeout: float = 300.0, quiesce: bool = False) -> str | None:
    """The agent's changes against ``base_tree`` by git in the episode's sandbox; None when git cannot. The
    agent's processes are held while git reads the tree: killed first with ``quiesce`` (the episode's end),
    else stopped for the command's time."""
    git = git_command()
    script = (
        f"test -d {REPO}/.git && test ! -L {REPO} && cd {REPO} || exit 97; {_NO_FILTERS.format(git=git)}"
        f'{git} "$@" add -A . && {git} "$@" {DIFF} {base_tree}'
    )
    result = sb.run(script, timeout=timeout, max_stdout=max_bytes, quiesce=quiesce, freeze=not quiesce)
    if result.truncated:
        raise DiffUnavailable(f"the diff is larger than {max_bytes} bytes")
    if not result.ok:
        return None
    return result.stdout.decode("utf-8", errors="surrogateescape")


def tree_diff(
    sb: Sandbox,
    start: StartState,
    task: Task,
    policy: SandboxPolicy,
    max_bytes: int,
    timeout: float = 300.0,
    quiesce: bool = False,
) -> str:
    """The agent's changes without trusting its git: its /testbed (minus .git) replayed in a fresh sandbox."""
    work = f"/swebox-tree-{secrets.token_hex(8)}"
    pack = (
        f"if test -d {REPO} && test ! -L {REPO}; then tar -C {REPO} --exclude=./.git -cf - .; "
        "else tar -cf - -T /dev/null; fi"
    )
    limit = 4 * max_bytes + (64 << 20)
    packed = sb.run(pack, timeout=timeout, max_stdout=limit, quiesce=quiesce, freeze=not quiesce)
    if packed.truncated:
        raise DiffUnavailable(f"the repository is larger than {limit} bytes")
    if not packed.ok:
        raise DiffUnavailable(f"packing the repository failed: {packed.stderr[-500:]}")
    with Sandbox(list(start.layers), policy) as fresh:
        base = start.base_tree if start.prepared else prepare_start(fresh, task, timeout)
        _run(fresh, f"mkdir -p {work}", 30, "making a work folder")
        fresh.write_file(f"{work}/repo.tar", packed.stdout)
        git = git_command()
        replay = fresh.run(
            f"cd {REPO} && find . -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {{}} + && "
            f"tar -xf {work}/repo.tar --no-same-owner && {git} add -A . && {git} {DIFF} {base}",
            timeout=timeout,
            max_stdout=max_bytes,
        )
        if replay.truncated:
            raise DiffUnavailable(f"the diff is larger than {max_bytes} bytes")
        if not replay.ok:  # the host's sandbox and layers worked at reset: what fails here is the agent's tree
            status = "timed out" if replay.timed_out else f"exit {replay.exit_code}"
            raise DiffUnavailable(f"replaying the agent's repository failed ({status}): {replay.stderr[-500:]}")
        return replay.stdout.decode("utf-8", errors="surrogateescape")


def agent_diff(
    sb: Sandbox,
    start: StartState,
    task: Task,
    base_tree: str,
    policy: SandboxPolicy,
    max_bytes: int,
    quiesce: bool = False,
) -> tuple[str, str]:
    """(diff, how): by git in the episode's sandbox, else by replaying the tree ('git' or 'tree').
    ``quiesce``: kill every process of the agent first (the episode's end: nothing may run beside the capture)."""
    diff = git_diff(sb, base_tree, max_bytes, quiesce=quiesce)
    if diff is not None:
        return diff, "git"
    return tree_diff(sb, start, task, policy, max_bytes), "tree"  # quiesced already, when asked; else frozen
