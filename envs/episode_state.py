"""An episode's repository state: how its start state is prepared, and how the agent's diff is taken.

The start state is the task's layers plus the task's ``setup_commands`` and, for tasks whose tests are
hidden, the removal of the test files that ``test_patch`` adds (the grader brings them back). Its git tree
(``git add -A && git write-tree``) is the base of the agent's diff, so the preparation never shows up as
the agent's change and a commit made by the agent does not hide its work.

The diff is taken with git inside the episode's sandbox. When the agent broke git (deleted ``.git``,
removed objects, made ``/testbed`` something else), the repository without ``.git`` is packed and compared
in a fresh sandbox over the start layers instead, so the diff never depends on the agent leaving git intact.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass

from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy
from swebox.envs.tasks.diffs import parse_diff
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.testids import file_of_test

REPO = "/testbed"
# The agent's shell may have changed directory, PATH, GIT_* variables or shell options: every command below
# runs in a clean environment of its own.
CLEAN = "/usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 /bin/sh -c "
GIT = ("git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.quotePath=false "
       "-c safe.directory='*' -c advice.addIgnoredFile=false")
DIFF = "diff --cached --binary --full-index --no-color --no-ext-diff --no-textconv --no-renames"
_TREE = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


class EpisodeError(RuntimeError):
    """The environment (not the agent) failed: a setup command, the sandbox, the repository's git."""


class DiffUnavailable(RuntimeError):
    """The agent's changes could not be turned into a diff (e.g. it filled the disk or made it too large)."""


@dataclass
class StartState:
    """Where an episode starts: the layers of its sandbox, and what is already prepared in them. Made by
    :func:`swebox.envs.task_episodes.open_task`, which also holds the layers for as long as episodes use them."""

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
    result = sb.exec(CLEAN + shlex.quote(script), timeout=timeout)
    if result.timed_out or result.exit_code != 0:
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        raise EpisodeError(f"{what} failed ({status}): {result.output[-1500:]}")
    return result.output


def prepare_start(sb: Sandbox, task: Task, timeout: float = 600.0) -> str:
    """Run the task's setup commands and remove hidden tests in ``sb``; returns the start state's git tree."""
    for command in task.setup_commands:
        result = sb.exec(f"cd {REPO} && {command}", timeout=timeout)
        if result.timed_out or result.exit_code != 0:
            raise EpisodeError(f"task {task.instance_id}: setup command {command!r} failed "
                               f"(exit {result.exit_code}, timed out: {result.timed_out}): {result.output[-1500:]}")
    hidden = hidden_test_paths(task)
    if hidden:
        _run(sb, f"cd {REPO} && rm -f -- " + " ".join(shlex.quote(p) for p in hidden), 60, "removing hidden tests")
    out = _run(sb, f"cd {REPO} && {GIT} add -A . && {GIT} write-tree", timeout,
               f"task {task.instance_id}: recording the start state with git (the env layer must hold "
               f"{REPO} as a git repository)")
    tree = out.strip().splitlines()[-1] if out.strip() else ""
    if not _TREE.match(tree):
        raise EpisodeError(f"task {task.instance_id}: expected a git tree id from `git write-tree`; found {out!r}")
    return tree


def _read(sb: Sandbox, path: str, max_bytes: int, what: str) -> bytes:
    try:
        return sb.read_file(path, max_bytes=max_bytes)
    except SandboxError as exc:
        if "larger than" in str(exc):
            raise DiffUnavailable(f"{what} is larger than {max_bytes} bytes") from None
        raise


def git_diff(sb: Sandbox, base_tree: str, max_bytes: int, timeout: float = 300.0) -> str | None:
    """The agent's changes against ``base_tree`` by git in the episode's sandbox; None when git cannot."""
    out = f"/swebox-diff-{secrets.token_hex(8)}"
    script = (f"test -d {REPO}/.git && test ! -L {REPO} && cd {REPO} && {GIT} add -A . && "
              f"{GIT} {DIFF} {base_tree} > {out}")
    result = sb.exec(CLEAN + shlex.quote(script), timeout=timeout)
    if result.timed_out or result.exit_code != 0:
        return None
    try:
        return _read(sb, out, max_bytes, "the diff").decode("utf-8", errors="surrogateescape")
    except OSError:
        return None


def tree_diff(sb: Sandbox, start: StartState, task: Task, policy: SandboxPolicy, max_bytes: int,
              timeout: float = 300.0) -> str:
    """The agent's changes without trusting its git: its /testbed (minus .git) replayed in a fresh sandbox."""
    work = f"/swebox-tree-{secrets.token_hex(8)}"
    pack = (f"mkdir -p {work} && if test -d {REPO} && test ! -L {REPO}; then "
            f"tar -C {REPO} --exclude=./.git -cf {work}/repo.tar .; else tar -cf {work}/repo.tar -T /dev/null; fi")
    result = sb.exec(CLEAN + shlex.quote(pack), timeout=timeout)
    if result.timed_out or result.exit_code != 0:
        raise DiffUnavailable(f"packing the repository failed: {result.output[-500:]}")
    data = _read(sb, f"{work}/repo.tar", 4 * max_bytes + (64 << 20), "the repository")
    with Sandbox(list(start.layers), policy) as fresh:
        base = start.base_tree if start.prepared else prepare_start(fresh, task, timeout)
        _run(fresh, f"mkdir -p {work}", 30, "making a work folder")
        fresh.write_file(f"{work}/repo.tar", data)
        _run(fresh, f"cd {REPO} && find . -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {{}} + && "
                    f"tar -xf {work}/repo.tar --no-same-owner && {GIT} add -A . && "
                    f"{GIT} {DIFF} {base} > {work}/agent.diff", timeout, "replaying the agent's repository")
        return _read(fresh, f"{work}/agent.diff", max_bytes, "the diff").decode("utf-8", errors="surrogateescape")


def agent_diff(sb: Sandbox, start: StartState, task: Task, base_tree: str, policy: SandboxPolicy,
               max_bytes: int) -> tuple[str, str]:
    """(diff, how): by git in the episode's sandbox, else by replaying the tree ('git' or 'tree')."""
    diff = git_diff(sb, base_tree, max_bytes)
    if diff is not None:
        return diff, "git"
    return tree_diff(sb, start, task, policy, max_bytes), "tree"
