"""Cost per rollout in real sandboxes: CPU seconds, peak memory and bytes written are read from the sandbox's
cgroups (or procfs without them) and land in info["cost"] and the env/* metrics (envs/episodes/episode_cost.py)."""

from __future__ import annotations

import pytest
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_cost import METRICS
from swebox.envs.episodes.episode_state import StartState
from swebox.envs.sandbox import Sandbox, SandboxPolicy
from swebox.envs.sandbox.usage import from_procfs

from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task

# 64 MiB held resident, some CPU work (a fixed amount of work, not a time), 3 MiB written outside the repository
HEAVY = (
    "python -c 'x = bytearray(64 << 20); x[::4096] = b\"1\" * len(x[::4096]); "
    "sum(i * i for i in range(2_000_000))' && dd if=/dev/zero of=/var/blob bs=1M count=3 status=none"
)


@pytest.fixture
def episode(calc_layer):
    made = []

    def make(**config) -> SWEEpisode:
        ep = SWEEpisode(calc_task(), StartState([calc_layer], [calc_layer]), EpisodeConfig(**config))
        made.append(ep)
        return ep

    yield make
    for ep in made:
        ep.close()


def test_cost_of_a_rollout_is_measured_and_a_reset_starts_it_afresh(episode):
    ep = episode(max_turns=5)
    ep.reset()
    assert ep.step(bash(HEAVY)).info["exit_code"] == 0
    ep.step(apply_patch(GOLD))
    last = ep.step(SUBMIT)
    cost, m = last.info["cost"], last.info["metrics"]
    assert last.reward == 1.0 and cost["source"] in ("cgroup v1", "cgroup v2", "procfs")
    assert cost["cpu_s"] > 0 and cost["grade_cpu_s"] > 0
    assert cost["peak_mb"] >= 64 and cost["grade_peak_mb"] > 0
    assert cost["upper_mb"] >= 3  # the blob is in the writable layer
    assert cost["wall_s"] >= m["env/reset_s"] + m["env/exec_s"] + m["env/grade_s"]
    assert cost["grade_s"] == m["env/grade_s"]
    assert {name: m[name] for name in METRICS} == {
        "env/wall_s": cost["wall_s"],
        "env/cpu_s": cost["cpu_s"],
        "env/grade_cpu_s": cost["grade_cpu_s"],
        "env/peak_mb": cost["peak_mb"],
        "env/grade_peak_mb": cost["grade_peak_mb"],
        "env/upper_mb": cost["upper_mb"],
    }

    ep.reset()  # the same sandbox: its writable layer dropped, and the count starts again
    light = ep.step(SUBMIT).info["cost"]
    assert light["upper_mb"] < 3 and light["cpu_s"] < cost["cpu_s"] + cost["grade_cpu_s"]
    if light["source"] == "cgroup v1":  # v2's memory.peak cannot be reset: there it is the sandbox's peak
        assert light["peak_mb"] < 64


def test_cost_off_reads_nothing_but_the_clock(episode):
    ep = episode(max_turns=2, cost=False)
    ep.reset()
    info = ep.step(SUBMIT).info
    assert set(info["cost"]) == {"wall_s", "grade_s"} and info["cost"]["wall_s"] > 0
    assert all(info["metrics"][name] == 0.0 for name in METRICS if name != "env/wall_s")


def test_without_cgroups_procfs_counts_the_finished_commands(calc_layer):
    with Sandbox([calc_layer], SandboxPolicy(network="none", use_cgroups=False)) as sb:
        before = sb.usage()
        assert before.source == "procfs"
        sb.exec("python -c 'sum(i * i for i in range(3_000_000))'")  # ended and reaped: its time moved up
        after = sb.usage()
        assert after.cpu_s > before.cpu_s and after.peak_bytes > 0
        assert from_procfs(2**22 + 12345) == (None, None, "procfs")  # no such process: nothing, not an error
