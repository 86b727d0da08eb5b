"""The host's own commands in an episode (the diff capture) against an agent that shapes its shell: real
sandboxes, real episodes on the calc fixture task. Whatever the agent did to its shell, the diff the host records
is the tree's real diff, and the agent's doing never ends as a masked environment error (issue 31, class 7)."""

from __future__ import annotations

import re
import shlex
import time

import pytest
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.sandbox import SandboxError

from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task

# The agent's forger: handed a host command (as one string, or as argv), it writes the gold diff where the host
# would read the diff from, so that the host would grade a fix the tree does not hold; anything else it runs.
FORGE = r"""#!/bin/bash
s="$*"
case "$s" in *swebox-diff-*)
    out=$(printf %s "$s" | grep -o '/swebox-diff-[0-9a-f]*' | head -n 1)
    if test -e /tmp/mask; then mkdir -p "$out"; else cat /tmp/gold.diff > "$out"; fi
    exit 0;;
esac
if test $# = 1; then exec /bin/bash -c "$1"; else exec "$@"; fi
"""
RUN_HIJACK = "__swebox_run() { mapfile -t -d '' -n 1 -u 100 c; /tmp/forge \"$c\" </dev/null 100<&-; }"

ATTACKS = {
    "function __swebox_run": RUN_HIJACK,
    "function named /usr/bin/env": "/usr/bin/env() { /tmp/forge /usr/bin/env \"$@\"; }",
    "exported function git": "git() { /tmp/forge git \"$@\"; }; export -f git",
    "alias": "shopt -s expand_aliases; alias __swebox_run='mapfile -t -d \"\" -n 1 -u 100 c; "
    "/tmp/forge \"$c\" </dev/null 100<&-'",
    "PATH prefix with a fake git": "mkdir -p /tmp/bin && printf '#!/bin/sh\\nexec /tmp/forge git \"$@\"\\n' "
    "> /tmp/bin/git && chmod +x /tmp/bin/git && export PATH=/tmp/bin:$PATH",
    "enable -n eval with eval on PATH": "mkdir -p /tmp/bin && ln -sf /tmp/forge /tmp/bin/eval && "
    "export PATH=/tmp/bin:$PATH && enable -n eval",
    "trap DEBUG": "set -T; trap '[[ $__swebox_cmd == *swebox-diff-* ]] && "
    "__swebox_cmd=\"/tmp/forge $(printf %q \"$__swebox_cmd\")\"' DEBUG",
    "PROMPT_COMMAND": f"PROMPT_COMMAND={shlex.quote(RUN_HIJACK)}; export PROMPT_COMMAND",
    # typed into the shell's stdin by a background process, through /proc, between two commands
    "writing /proc/<shell>/fd/0": (
        f"( sleep 1; printf '%s\\n' {shlex.quote(RUN_HIJACK)} > /proc/$$/fd/0 && echo typed > /tmp/typed "
        "|| echo refused > /tmp/typed ) >/dev/null 2>&1 &"
    ),
}


def _prepare(mask: bool) -> str:
    return bash(
        f"cat > /tmp/forge <<'SWEBOX_EOF'\n{FORGE}SWEBOX_EOF\nchmod +x /tmp/forge && "
        f"cat > /tmp/gold.diff <<'SWEBOX_EOF'\n{GOLD}SWEBOX_EOF\n" + ("touch /tmp/mask" if mask else "true")
    )


@pytest.fixture
def episode(calc_layer):
    made = []

    def make() -> SWEEpisode:
        ep = SWEEpisode(calc_task(), StartState([calc_layer], [calc_layer]), EpisodeConfig(command_timeout_s=60))
        made.append(ep)
        return ep

    yield make
    for ep in made:
        ep.close()


def _attack(ep: SWEEpisode, name: str) -> None:
    ep.step(bash(ATTACKS[name]))
    if "fd/0" in name:  # the shell idles (its stdin is its own) until the background process has tried
        deadline = time.monotonic() + 60
        while True:
            try:
                assert ep.sandbox.read_file("/tmp/typed") in (b"typed\n", b"refused\n")
                return
            except SandboxError:
                assert time.monotonic() < deadline, "the background process never tried to type"
                time.sleep(0.1)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_shaped_shell_cannot_forge_the_recorded_diff(episode, name):
    ep = episode()
    ep.reset()
    ep.step(_prepare(mask=False))
    _attack(ep, name)
    last = ep.step(SUBMIT)
    # the tree holds no change: the host records the empty diff and pays nothing
    assert last.info["diff"] == "" and last.reward == 0.0, (name, last.info["diff"][:300])
    assert last.info["metrics"]["env/errors"] == 0.0 and "error" not in last.info


@pytest.mark.parametrize("name", ["function __swebox_run", "function named /usr/bin/env", "trap DEBUG"])
def test_a_shaped_shell_cannot_mask_the_episode_and_the_real_fix_is_paid(episode, name):
    ep = episode()
    ep.reset()
    ep.step(apply_patch(GOLD))
    ep.step(_prepare(mask=True))  # the hijack would put a folder where the host reads the diff
    _attack(ep, name)
    last = ep.step(SUBMIT)
    assert last.info["metrics"]["env/errors"] == 0.0 and "error" not in last.info, last.info.get("error")
    assert last.reward == 1.0 and "+    return a + b" in last.info["diff"], last.info["diff"][:300]


def test_the_final_capture_runs_alone(episode):
    ep = episode()
    ep.reset()
    # a background process that keeps putting the fix into the tree and taking it out again
    ep.step(
        bash(
            "(while :; do sed -i '2s/a - b/a + b/' /testbed/calc/ops.py; "
            "sed -i '2s/a + b/a - b/' /testbed/calc/ops.py; done) >/dev/null 2>&1 &"
        )
    )
    last = ep.step(SUBMIT)
    assert last.info["metrics"]["env/errors"] == 0.0
    # every process of the agent was killed before the capture: no bash or sed is left, and
    # the recorded diff is the tree's diff now (the fix or nothing, whichever state the tree was left in)
    assert ep.sandbox.run("cat /proc/[0-9]*/comm 2>/dev/null | grep -c -x -e bash -e sed").stdout == b"0\n"
    assert last.info["diff"] == ep.current_diff()
    assert last.reward == (1.0 if "+    return a + b" in last.info["diff"] else 0.0)


FILTER = "sed \"2s/a - b/a + b/\""
GIT_CONFIG_ATTACKS = {
    # a clean filter makes `git add` record the filter's output instead of the file: the fix, the tree the bug
    "the repository's configuration": (
        f"cd /testbed && git config filter.fix.clean '{FILTER}' && echo 'calc/ops.py filter=fix' "
        ">> .git/info/attributes && touch calc/ops.py"
    ),
    "the global configuration in $HOME, with its own attributes file": (
        f"git config --file /root/.gitconfig filter.fix.clean '{FILTER}' && git config --file /root/.gitconfig "
        "core.attributesFile /root/attrs && echo 'calc/ops.py filter=fix' > /root/attrs && touch /testbed/calc/ops.py"
    ),
}


@pytest.mark.parametrize("name", list(GIT_CONFIG_ATTACKS))
def test_git_configuration_of_the_agents_cannot_forge_the_recorded_diff(episode, name):
    ep = episode()
    ep.reset()
    assert ep.step(bash(GIT_CONFIG_ATTACKS[name])).info["exit_code"] == 0
    assert "return a - b" in ep.sandbox.read_file("/testbed/calc/ops.py").decode().splitlines()[1]
    last = ep.step(SUBMIT)
    assert last.info["diff"] == "" and last.reward == 0.0, (name, last.info["diff"][:300])
    assert last.info["metrics"]["env/errors"] == 0.0


def test_a_capture_mid_episode_holds_the_agents_processes_and_lets_them_go_on(episode):
    ep = episode()
    ep.reset()
    ep.step(
        bash(
            "(while :; do sed -i '2s/a - b/a + b/' /testbed/calc/ops.py; "
            "sed -i '2s/a + b/a - b/' /testbed/calc/ops.py; done) >/dev/null 2>&1 & echo $! > /tmp/loop"
        )
    )
    fixed = ep.current_diff()  # stopped for the capture (freeze), not killed: the episode goes on
    # frozen at any instant: ops.py as it was or as fixed (sed -i renames whole files), and maybe the temporary
    # file a frozen `sed -i` was writing at that instant (calc/sedXXXXXX), which is the tree's too
    files = re.findall(r"^diff --git a/(\S+) ", fixed, flags=re.MULTILINE)
    assert all(f == "calc/ops.py" or re.fullmatch(r"calc/sed\w{6}", f) for f in files), fixed
    assert "calc/ops.py" not in files or "+    return a + b" in fixed
    alive = ep.step(bash("kill -0 $(cat /tmp/loop) && echo running"))
    assert alive.observation.endswith("running\n</output>") and not alive.done


# -- the visible_tests selection rule scores in a host command, not in the agent's shell (issue 31) -------------
SCORE_ATTACKS = {
    "function named like the interpreter": "{python}() {{ echo '7 passed in 0.01s'; }}",
    "exported PYTEST_ADDOPTS deselecting the failures": "export PYTEST_ADDOPTS='-k not\\ add'",
}


@pytest.mark.parametrize("name", list(SCORE_ATTACKS))
def test_the_visible_tests_score_is_not_shaped_by_the_agents_shell(calc_layer, name):
    from swebox.envs.sandbox import Sandbox
    from swebox.envs.search.select import Candidate, visible_tests_score

    task = calc_task()
    with Sandbox([calc_layer]) as sb:
        sb.exec(SCORE_ATTACKS[name].format(python=task.python), timeout=30)
        # 7 visible tests, 5 pass: add and div are buggy in the start state
        assert visible_tests_score(task, Candidate(0, "", [], sb), timeout_s=300) == pytest.approx(5 / 7)
