"""SWEEpisode on the calc fixture project in real sandboxes: scripted policies, limits, metrics, hostile agents."""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path

import pytest
from swebox.envs.episodes.episode import METRIC_NAMES, EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import StartState

from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task


@pytest.fixture
def episode(calc_layer):
    made = []

    def make(**config) -> SWEEpisode:
        task = config.pop("task", None) or calc_task()
        ep = SWEEpisode(task, StartState([calc_layer], [calc_layer]), EpisodeConfig(**config))
        made.append(ep)
        return ep

    yield make
    for ep in made:
        ep.close()


def test_metric_names_match_docs_metrics():
    documented = set(re.findall(r"`(env/[a-z0-9_]+)`", (Path(__file__).parents[3] / "docs/metrics.md").read_text()))
    assert documented == set(METRIC_NAMES)


def test_gold_patch_through_bash_resolves_and_empty_submission_does_not(episode):
    ep = episode(max_turns=5)
    messages = ep.reset()
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "add(2, 3) returns -1" in messages[1]["content"] and "5 turns" in messages[1]["content"]
    first = ep.step(apply_patch(GOLD))
    assert not first.done and first.reward == 0.0 and first.observation.startswith("<returncode>0</returncode>")
    last = ep.step(SUBMIT)
    assert (last.terminated, last.truncated, last.reward) == (True, False, 1.0)
    m = last.info["metrics"]
    assert (m["env/turns"], m["env/resolved"], m["env/f2p_frac"], m["env/errors"]) == (2.0, 1.0, 1.0, 0.0)
    assert m["env/grade_s"] > 0 and m["env/reset_s"] > 0 and m["env/exec_s"] > 0
    assert last.info["grade"]["resolved"] and "+    return a + b" in last.info["diff"]
    with pytest.raises(RuntimeError, match="call reset"):
        ep.step(SUBMIT)
    ep.reset()  # the same sandbox, its overlay dropped: the fix is gone
    empty = ep.step(SUBMIT)
    assert empty.reward == 0.0 and empty.info["diff"] == "" and empty.info["metrics"]["env/resolved"] == 0.0


def test_turn_limit_truncates_and_still_grades(episode):
    ep = episode(max_turns=2, warn_turns_left=1)
    ep.reset()
    first = ep.step(apply_patch(GOLD))
    assert "[1 turn left." in first.observation
    last = ep.step(bash("echo still working"))
    assert (last.terminated, last.truncated, last.info["reason"], last.reward) == (False, True, "max_turns", 1.0)
    assert "turn limit was reached" in last.observation and len(last.observation) <= 10_000


def test_no_grading_on_truncation_when_disabled(episode):
    ep = episode(max_turns=1, grade_on_truncation=False)
    ep.reset()
    last = ep.step(apply_patch(GOLD))
    assert last.truncated and last.reward == 0.0 and last.info["grade"] is None


def test_time_limit_bounds_commands_and_truncates(episode):
    ep = episode(time_limit_s=2.0, command_timeout_s=60.0, max_turns=10)
    ep.reset()
    result = ep.step(bash("sleep 30"))
    assert result.info["timed_out"] and result.truncated and result.info["reason"] == "time_limit"
    # `sleep 30` is within its own 60 s timeout: it timed out because the 2 s episode cut it
    assert result.info["metrics"]["env/timeouts"] == 1.0


def test_malformed_replies_cost_a_turn_and_are_counted(episode):
    ep = episode(max_turns=20, max_reply_chars=5000)
    ep.reset()
    replies = [
        "no action at all",
        bash("ls") + bash("ls"),
        "<function=rm_rf></function>",
        "x" * 6000,
        bash("echo caf\u00e9 \u2603") + "\x00",
        "```bash\necho a\x00b\n```",
    ]
    outcomes = [ep.step(r) for r in replies]
    assert [o.info["format_error"] for o in outcomes] == [True, True, True, True, False, True]
    assert "caf\u00e9 \u2603" in outcomes[4].observation
    assert all("Format error" in o.observation for o in outcomes if o.info["format_error"])
    assert ep.metrics["env/format_errors"] == 5.0 and not ep.done


def test_hanging_command_times_out_and_the_episode_continues(episode):
    ep = episode(command_timeout_s=3.0)  # `echo alive` below must finish within it on a loaded machine too
    ep.reset()
    hung = ep.step(bash("sleep 100"))
    assert hung.info["timed_out"] and "timed out" in hung.observation and not hung.done
    assert ep.step(bash("echo alive")).observation.endswith("alive\n</output>")
    assert ep.metrics["env/timeouts"] == 1.0


def test_agent_commits_and_deletes_git_the_diff_is_still_found(episode):
    ep = episode()
    ep.reset()
    ep.step(apply_patch(GOLD))
    ep.step(bash("cd /testbed && git -c user.email=a@b -c user.name=a commit -qam fix && git status --short"))
    committed = ep.step(SUBMIT)
    assert committed.reward == 1.0 and committed.info["diff_source"] == "git"
    ep.reset()
    ep.step(apply_patch(GOLD))
    ep.step(bash("rm -rf /testbed/.git && export GIT_DIR=/nowhere && cd /"))
    no_git = ep.step(SUBMIT)
    assert no_git.reward == 1.0 and no_git.info["diff_source"] == "tree"


def test_destroying_the_repo_or_the_shell_gives_reward_zero_not_an_error(episode):
    ep = episode()
    ep.reset()
    ep.step(bash("cd / && rm -rf /testbed /venv 2>/dev/null; ls /testbed"))
    gone = ep.step(SUBMIT)
    assert gone.reward == 0.0 and gone.info["metrics"]["env/errors"] == 0.0
    ep.reset()
    assert ep.step(bash("test -f /testbed/calc/ops.py && echo back")).observation.endswith("back\n</output>")
    killed = ep.step(bash("kill -9 $$"))
    assert not killed.done
    ep.step(apply_patch(GOLD))
    assert ep.step(SUBMIT).reward == 1.0


def test_memory_hog_is_contained(episode):
    # the memory cgroup's limit is memory_mb plus the tmpfs sizes (SandboxPolicy.cgroup_memory_mb): small ones here
    ep = episode(sandbox={"memory_mb": 256, "upper_size_mb": 256, "tmp_size_mb": 64}, command_timeout_s=30)
    ep.reset()
    hog = ep.step(bash("/venv/bin/python -c 'x = bytearray(2 * 1024**3); print(len(x))'"))
    assert "2147483648" not in hog.observation and not hog.done
    assert ep.step(bash("echo ok")).observation.endswith("ok\n</output>")


def test_huge_output_is_cut_to_the_observation_limit(episode):
    ep = episode(max_obs_chars=2000)
    ep.reset()
    obs = ep.step(bash("seq 1 100000")).observation
    assert len(obs) <= 2000 and obs.startswith("<returncode>0</returncode>") and "100000" in obs
    assert "characters cut from the middle" in obs


def test_setup_commands_and_hidden_tests_shape_the_start_but_not_the_diff(episode):
    new_test = (
        "diff --git a/tests/test_hidden.py b/tests/test_hidden.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_hidden.py\n@@ -0,0 +1,2 @@\n+def test_h():\n+    pass\n"
    )
    task = calc_task(
        setup_commands=["echo prepared > NOTES.txt", "printf 'x' > tests/test_hidden.py"],
        hidden_tests=True,
        test_patch=new_test,
    )
    ep = episode(task=task)
    ep.reset()
    look = ep.step(bash("cat /testbed/NOTES.txt; ls /testbed/tests"))
    assert "prepared" in look.observation and "test_hidden.py" not in look.observation
    done = ep.step(SUBMIT)
    assert done.info["diff"] == "" and done.reward == 0.0


def test_config_errors_say_what_to_fix():
    with pytest.raises(ValueError, match="max_turns: expected a whole number >= 1"):
        EpisodeConfig(max_turns=0)
    with pytest.raises(ValueError, match="style: expected one of bash_block"):
        EpisodeConfig(style="yaml")
    with pytest.raises(ValueError, match=r"unknown keys \['max_turn'\]"):
        EpisodeConfig.from_dict({"max_turn": 3})
    with pytest.raises(ValueError, match="without network"):
        EpisodeConfig(sandbox={"network": "host"})
    with pytest.raises(Exception, match="unknown keys"):
        EpisodeConfig(sandbox={"memory": 1})


def test_filling_the_disk_is_enospc_not_a_dead_sandbox(episode):
    # the writable layer and /tmp together exceed memory_mb: their pages count against the memory cgroup
    ep = episode(sandbox={"memory_mb": 256, "upper_size_mb": 300, "tmp_size_mb": 64}, command_timeout_s=60)
    ep.reset()
    fill = ep.step(
        bash(
            "for i in 1 2 3 4; do head -c 100M /dev/zero > /testbed/f$i || echo FULL$i; done; "
            "head -c 100M /dev/zero > /tmp/t || echo TMPFULL; echo done"
        )
    )
    assert not fill.done, fill.info  # was: the sandbox OOM-killed, BrokenPipeError, an env error
    assert "No space left on device" in fill.observation and "FULL4" in fill.observation
    assert "TMPFULL" in fill.observation and fill.observation.endswith("done\n</output>")
    ep.step(bash("rm -f /testbed/f? /tmp/t"))
    ep.step(apply_patch(GOLD))
    done = ep.step(SUBMIT)
    assert done.reward == 1.0 and done.info["metrics"]["env/errors"] == 0.0


def test_filling_the_inodes_is_enospc_and_a_full_tree_scores_zero_not_an_error(episode):
    # issue 31, class 10: the writable layer's inode cap (SandboxPolicy.upper_inodes), not the host's inodes
    ep = episode(sandbox={"upper_inodes": 3000}, command_timeout_s=120)
    fill = (
        "mkdir -p /testbed/junk && cd /testbed/junk && i=0; while [ $i -lt 5000 ]; do i=$((i+1)); "
        ": > f$i 2>/tmp/why || break; done; echo made $i; cat /tmp/why"
    )
    ep.reset()
    full = ep.step(bash(fill))
    assert not full.done and "No space left on device" in full.observation, full.observation
    assert int(full.observation.split("made ")[1].split()[0]) < 3000
    assert ep.step(bash("echo alive")).observation.endswith("alive\n</output>")
    graded = ep.step(SUBMIT)  # git has no inode left for its index: the capture falls back, nothing is masked
    assert graded.reward == 0.0 and graded.info["metrics"]["env/errors"] == 0.0 and "error" not in graded.info
    ep.reset()
    ep.step(bash(fill))
    ep.step(bash("rm -rf /testbed/junk"))
    ep.step(apply_patch(GOLD))
    fixed = ep.step(SUBMIT)
    assert fixed.reward == 1.0 and fixed.info["metrics"]["env/errors"] == 0.0


def test_a_sandbox_that_dies_under_the_agents_command_scores_zero_and_is_not_an_error(episode):
    ep = episode(command_timeout_s=60)
    ep.reset()
    ep.step(apply_patch(GOLD))  # even a fixed repo: a dead sandbox is a failed attempt, graded nothing
    pid = ep._sandbox.pid
    threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()  # as the OOM killer takes the whole sandbox
    died = ep.step(bash("sleep 30"))
    assert died.done and died.reward == 0.0 and died.info["reason"] == "sandbox_died"
    assert "error" not in died.info  # a trainer masks errored episodes out of the loss; this one must count
    metrics = died.info["metrics"]
    assert (metrics["env/sandbox_deaths"], metrics["env/errors"]) == (1.0, 0.0)


def test_gradings_queue_for_a_node_slot_instead_of_running_all_at_once(episode, tmp_path, monkeypatch):
    import contextlib
    import time

    from swebox.envs.episodes import episode as episode_module

    monkeypatch.setenv("SWEBOX_GRADE_SLOTS_DIR", str(tmp_path / "slots"))
    # The two submissions reach the slot at times a loaded machine decides (each first stops the agent's
    # processes and takes the diff): the second could come after the first's grading was half over, or done,
    # and wait less than the test asks. So the first grading starts only once both have asked for the slot.
    arrived, real_slot, real_grade = [], episode_module.grade_slot, episode_module.grade

    @contextlib.contextmanager
    def counted_slot(slots: int):
        arrived.append(threading.get_ident())
        with real_slot(slots) as waited:
            yield waited

    def grade_once_both_asked(*args, **kwargs):
        deadline = time.monotonic() + 120
        while len(arrived) < 2:
            assert time.monotonic() < deadline, "the second submission never asked for a grading slot"
            time.sleep(0.01)
        return real_grade(*args, **kwargs)

    monkeypatch.setattr(episode_module, "grade_slot", counted_slot)
    monkeypatch.setattr(episode_module, "grade", grade_once_both_asked)
    eps = [episode(grade_slots=1) for _ in range(2)]
    for ep in eps:
        ep.reset()
        ep.step(apply_patch(GOLD))
    results = [None, None]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, eps[i].step(SUBMIT))) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.reward for r in results] == [1.0, 1.0]  # both graded for real
    waits = sorted(r.info["metrics"]["env/grade_wait_s"] for r in results)
    grades = [r.info["metrics"]["env/grade_s"] for r in results]
    assert waits[0] < 0.5 and waits[1] > 0.5 * min(grades)  # the second waited for the first's grading


def test_a_log_parser_crash_scores_zero_and_only_a_host_fault_masks(calc_layer, tmp_path):
    """Issue 31 class 8: output that crashes the log parser is the run's doing (reward 0, counted in the loss);
    a grading sandbox that cannot start (its layer folder is gone) is the host's (an env error, masked)."""
    from tests.calc import calc_log_task
    from tests.envs.tasks.graders.test_log_grading import CRASH_LINES, crash_diff

    task = calc_log_task(calc_task(), parser="mwaskom/seaborn")
    outcomes = []
    for grade_layers, diff in (
        ([calc_layer], crash_diff(GOLD, CRASH_LINES["mwaskom/seaborn"])),
        ([tmp_path / "gone"], GOLD),
    ):
        ep = SWEEpisode(task, StartState([calc_layer], grade_layers), EpisodeConfig(max_turns=4))
        try:
            ep.reset()
            ep.step(apply_patch(diff))
            outcomes.append(ep.step(SUBMIT))
        finally:
            ep.close()
    crashed, host = outcomes
    assert crashed.reward == 0.0 and "error" not in crashed.info, crashed.info  # was: "grading failed: IndexError"
    assert crashed.info["metrics"]["env/errors"] == 0.0 and crashed.info["grade"]["log_status"] == "unparsable"
    assert host.reward == 0.0 and host.info["error"].startswith("grading failed"), host.info
    assert host.info["metrics"]["env/errors"] == 1.0 and host.info["grade"] is None
