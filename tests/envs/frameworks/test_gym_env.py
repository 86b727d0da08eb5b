"""SWEGymEnv: check_env, the Text spaces' charset and lengths, task choice, scripted episodes."""

from __future__ import annotations

import gymnasium
import pytest
import swebox.envs  # noqa: F401  (registers swebox/SWE-v0)
from gymnasium.utils.env_checker import check_env
from swebox.envs.frameworks.gym_env import CHARSET, SWEGymEnv, to_charset

from tests.calc import GOLD, SUBMIT, apply_patch, bash, calc_task


@pytest.fixture
def make_env(calc_layer):
    made = []

    def make(tasks=None, via_gym=False, **kwargs):
        tasks = tasks or [calc_task()]
        resolve = lambda task: [calc_layer]  # noqa: E731
        env = (
            gymnasium.make("swebox/SWE-v0", tasks=tasks, layers=resolve, **kwargs)
            if via_gym
            else SWEGymEnv(tasks, layers=resolve, **kwargs)
        )
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def test_to_charset_maps_and_cuts():
    assert to_charset("caf\u00e9\r\nline\x00\x1b[0m", 100) == "caf?\nline??[0m"
    long = to_charset("\u2603" * 5000, 600)
    assert len(long) <= 600 and set(long) <= set(CHARSET)


def test_check_env_passes_directly_and_through_gymnasium_make(make_env):
    check_env(make_env(max_turns=5))
    env = make_env(via_gym=True, max_turns=5, render_mode="ansi")
    assert env.spec.id == "swebox/SWE-v0" and env.spec.nondeterministic
    check_env(env.unwrapped)


def test_every_observation_is_in_the_space(make_env):
    task = calc_task(problem_statement="Unicode \u2603 issue\r\n" + "x" * 10_000)
    env = make_env(tasks=[task], max_obs_chars=1000, max_prompt_chars=3000, max_turns=5, render_mode="ansi")
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space and info["task_id"] == "calc-add" and info["reset_s"] > 0
    for action in (bash("printf 'caf\\xc3\\xa9 \\xff\\r\\n'; seq 1 5000"), "\u2603 no action", "x" * 200_000):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs in env.observation_space and reward == 0.0 and not (terminated or truncated)
        assert env.render() == obs
    assert len(env.reset(seed=0)[0]) <= 3000


def test_scripted_episode_terminates_with_reward_and_grade_info(make_env):
    env = make_env(max_turns=5)
    env.reset(options={"task_id": "calc-add"})
    env.step(apply_patch(GOLD))
    obs, reward, terminated, truncated, info = env.step(SUBMIT)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["reason"] == "submitted" and info["grade"]["resolved"] and info["metrics"]["env/resolved"] == 1.0
    env.reset()
    results = [env.step(bash("true")) for _ in range(5)]
    assert [r[3] for r in results] == [False] * 4 + [True]
    assert results[-1][4]["reason"] == "max_turns" and results[-1][1] == 0.0


def test_task_choice_by_id_and_by_seed(make_env):
    tasks = [calc_task(instance_id=f"calc-{i}") for i in range(4)]
    env = make_env(tasks=tasks)
    picks = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 1)]
    assert picks[0] == picks[2]
    assert env.reset(options={"task_id": "calc-3"})[1]["task_id"] == "calc-3"
    with pytest.raises(ValueError, match="no such task"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="unknown keys"):
        SWEGymEnv(tasks, max_turn=3)


def test_gymnasium_time_limit_still_grades(make_env):
    # gymnasium.make's max_episode_steps wraps a TimeLimit; the episode must end and be graded at that step
    env = make_env(via_gym=True, max_turns=10, max_episode_steps=2)
    env.reset(options={"task_id": "calc-add"})
    obs, reward, terminated, truncated, info = env.step(apply_patch(GOLD))
    assert not (terminated or truncated)
    obs, reward, terminated, truncated, info = env.step(bash("true"))
    assert truncated and not terminated
    assert info["reason"] == "step_limit" and info["grade"] is not None and info["grade"]["resolved"]
    assert reward == 1.0
    env.reset(options={"task_id": "calc-add"})  # and an unfixed repository is graded too: reward 0
    env.step(bash("true"))
    obs, reward, terminated, truncated, info = env.step(bash("true"))
    assert truncated and info["grade"] is not None and not info["grade"]["resolved"] and reward == 0.0


def test_make_with_the_module_prefix_registers_on_demand():
    # a fresh interpreter that never imported swebox: Gymnasium's `module:id` form imports and registers it
    import subprocess
    import sys

    code = (
        "import gymnasium, json, sys\n"
        "env = gymnasium.make('swebox.envs:swebox/SWE-v0', tasks=[json.loads(sys.argv[1])], layers=lambda t: [])\n"
        "print(type(env.unwrapped).__name__, env.spec.id)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, calc_task().to_json()], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "SWEGymEnv swebox/SWE-v0"
