"""Multi-turn rollouts: token/mask/logprob alignment, chat-template deltas, overflow, failures, the worker."""

from __future__ import annotations

import pytest
from swebox.envs.episodes.episode import StepResult
from swebox.envs.tasks import Task
from swebox.trainers.policy.generation import Generated
from swebox.trainers.policy.models import build_builtin_tokenizer
from swebox.trainers.rl.rollout import (
    LocalWorkerPool,
    Trajectory,
    observation_delta_ids,
    play_episode,
    prompt_ids,
)
from swebox.trainers.run.config import TrainConfig, load_config

from tests.calc import calc_task

TOK = build_builtin_tokenizer()


def stub_task(instance_id: str, **fields) -> Task:
    """A task for episodes that never look at it (scripted ones): its id, and the one test id a Task needs."""
    return Task(instance_id=instance_id, FAIL_TO_PASS=("tests/test_stub.py::test_stub",), **fields)


class ScriptedEpisode:
    """Observations 'obs 1', 'obs 2', ...; ends after ``turns`` replies with reward 1 if the last reply was 'ok'."""

    def __init__(self, turns: int = 3, fail_at: int | None = None) -> None:
        self.turns, self.fail_at, self.replies = turns, fail_at, []

    def submit_reply(self) -> None:  # no action style: an episode that fills the context ends unsubmitted
        return None

    def close(self) -> None:
        pass

    def reset(self):
        return [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]

    def step(self, reply: str) -> StepResult:
        self.replies.append(reply)
        if self.fail_at == len(self.replies):
            raise OSError("sandbox died")
        if len(self.replies) == self.turns:
            reward = 1.0 if reply == "ok" else 0.0
            metrics = {"env/turns": len(self.replies), "env/grade_s": 0.0}
            return StepResult("", reward, True, False, {"metrics": metrics})
        return StepResult(f"obs {len(self.replies)}", 0.0, False, False, {})


class ScriptedBackend:
    """Replies from a list of texts; logprob of the i-th token of a reply is -(i + 1) / 10."""

    def __init__(self, texts: list[str], stop: bool = True) -> None:
        self.texts, self.stop, self.calls = list(texts), stop, []

    def generate(self, prompts, max_new_tokens, seeds=None):
        self.calls.append((list(prompts[0]), max_new_tokens))
        ids = TOK.encode(self.texts.pop(0), add_special_tokens=False)[: max_new_tokens - int(self.stop)]
        if self.stop:
            ids.append(TOK.eos_token_id)
        return [Generated(ids, [-(i + 1) / 10 for i in range(len(ids))], "stop" if self.stop else "length")]

    def update_weights(self, state):
        pass


def cfg_with(*overrides: str) -> TrainConfig:
    return load_config(None, ["generation.max_new_tokens=16", "generation.max_context_tokens=512", *overrides])


def test_multi_turn_tokens_masks_and_logprobs_are_aligned():
    backend = ScriptedBackend(["look", "edit", "ok"])
    traj = play_episode(ScriptedEpisode(3), backend, TOK, cfg_with(), task_id="t", group_id="g")
    assert not traj.failed and not traj.truncated and traj.reward == 1.0 and traj.num_turns == 3
    assert len(traj.response_ids) == len(traj.loss_mask) == len(traj.old_logprobs)
    # the whole sequence is exactly the chat template of the conversation: model text kept, deltas between
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "look"},
        {"role": "user", "content": "obs 1"},
        {"role": "assistant", "content": "edit"},
        {"role": "user", "content": "obs 2"},
        {"role": "assistant", "content": "ok"},
    ]
    full = TOK.apply_chat_template(messages, tokenize=False)
    assert TOK.decode(traj.prompt_ids + traj.response_ids) == full.removesuffix("\n")  # ends at the last <|im_end|>
    assert traj.prompt_ids == prompt_ids(TOK, messages[:2])
    # mask: 1 exactly on the three model turns (each ending with <|im_end|>), logprobs 0 elsewhere
    model_tokens = [t for t, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    expected = [t for text in ("look", "edit", "ok") for t in [*TOK.encode(text, add_special_tokens=False), 2]]
    assert model_tokens == expected
    assert all(lp == 0.0 for lp, m in zip(traj.old_logprobs, traj.loss_mask, strict=True) if not m)
    first = len(TOK.encode("look", add_special_tokens=False)) + 1
    assert traj.old_logprobs[:first] == [-(i + 1) / 10 for i in range(first)]
    # the second call saw the first turn's tokens and the delta, as generated (token in, token out)
    assert backend.calls[1][0] == traj.prompt_ids + traj.response_ids[: len(backend.calls[1][0]) - len(traj.prompt_ids)]
    assert set(traj.metrics) >= {"timing/generate_s", "timing/env_s", "timing/grade_s", "env/turns"}


def test_delta_closes_a_turn_cut_by_the_token_limit():
    closed = observation_delta_ids(TOK, "obs", ended_turn=True)
    assert TOK.decode(closed) == "\n<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"
    assert observation_delta_ids(TOK, "obs", ended_turn=False) == [TOK.eos_token_id, *closed]


@pytest.mark.parametrize("mode, reward", [("mask", 0.0), ("penalize", -0.5), ("truncate", 0.0)])
def test_context_overflow_ends_the_episode_cleanly(mode, reward):
    cfg = cfg_with(
        "generation.max_context_tokens=60",
        "generation.max_new_tokens=30",
        f"rollout.on_context_overflow={mode}",
        "rollout.overflow_reward=-0.5",
    )
    backend = ScriptedBackend(["word " * 40] * 5, stop=False)
    traj = play_episode(ScriptedEpisode(5), backend, TOK, cfg)
    assert traj.truncated and not traj.failed and traj.reward == reward
    assert len(traj.prompt_ids) + len(traj.response_ids) <= 60
    assert all(limit <= 60 - len(prompt) for prompt, limit in backend.calls)


def test_an_environment_failure_is_a_failed_trajectory_not_an_exception():
    traj = play_episode(ScriptedEpisode(3, fail_at=2), ScriptedBackend(["a", "b", "c"]), TOK, cfg_with())
    assert traj.failed and "sandbox died" in traj.error and traj.reward == 0.0
    assert traj.metrics["env/errors"] == 1.0
    assert len(traj.response_ids) == len(traj.loss_mask) == len(traj.old_logprobs)


def test_trajectory_crosses_processes_pickled_and_checks_its_alignment():
    import pickle

    traj = play_episode(ScriptedEpisode(2), ScriptedBackend(["a", "ok"]), TOK, cfg_with(), "t", "g")
    assert pickle.loads(pickle.dumps(traj)) == traj  # what Ray does to it between an actor and the trainer
    with pytest.raises(ValueError, match="of one length"):
        Trajectory("t", "g", [1], response_ids=[1, 2], loss_mask=[1], old_logprobs=[0.0])


def test_worker_runs_groups_in_task_order_and_turns_a_broken_group_into_failed_trajectories():
    cfg = cfg_with(
        "model.hidden_size=32",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.num_kv_heads=2",
        "generation.max_new_tokens=4",
        "rollout.max_parallel_episodes=3",
    )

    def factory(task, n):
        if task.instance_id == "broken":
            raise RuntimeError("no layers")
        return [ScriptedEpisode(2) for _ in range(n)]

    pool = LocalWorkerPool(cfg, factory)
    trajs = pool.run_groups([stub_task("a"), stub_task("broken"), stub_task("b")], 3)
    assert [t.task_id for t in trajs] == ["a"] * 3 + ["broken"] * 3 + ["b"] * 3
    assert len({t.group_id for t in trajs}) == 3
    assert [t.failed for t in trajs] == [False] * 3 + [True] * 3 + [False] * 3
    assert all(t.num_turns == 2 and sum(t.loss_mask) > 0 for t in trajs if not t.failed)
    pool.set_weights(pool.worker.model.state_dict(), 1)
    assert pool.worker.version == 1


def test_worker_plays_whole_groups_together_so_each_turn_is_one_generation_batch():
    # 3 groups of 4 with 8 episodes in flight: groups a+b, then c; every turn of a wave is one engine call
    cfg = cfg_with(
        "model.hidden_size=32",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.num_kv_heads=2",
        "generation.max_new_tokens=4",
        "generation.batch_size=8",
        "generation.batch_wait_s=5",
        "rollout.max_parallel_episodes=8",
    )
    pool = LocalWorkerPool(cfg, lambda task, n: [ScriptedEpisode(2) for _ in range(n)])
    backend = pool.worker.backend
    sizes = []
    engine = backend._generate_batch

    def recording(prompts, max_new, seeds=None):
        sizes.append(len(prompts))
        return engine(prompts, max_new, seeds)

    backend._batcher._run = recording
    trajs = pool.run_groups([stub_task("a"), stub_task("b"), stub_task("c")], 4)
    assert [t.task_id for t in trajs] == ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    assert all(t.num_turns == 2 and not t.failed for t in trajs)
    assert sizes == [8, 8, 4, 4]
    assert backend._batcher._expected == 0  # every episode that joined left


def test_swe_episode_factory_shares_one_grade_cache_per_worker_and_the_switch_turns_it_off(calc_layer):
    from swebox.envs.episodes.grade_cache import GradeCache
    from swebox.trainers.rl.rollout import swe_episode_factory

    for enabled in (True, False):
        factory = swe_episode_factory(load_config(None, [f"env.grade_cache={enabled}"]), layers=[calc_layer])
        groups = [factory(calc_task(), 1) for _ in range(2)]
        try:
            assert len({id(g[0].grade_cache) for g in groups}) == 1  # one per worker, not per group
            assert isinstance(groups[0][0].grade_cache, GradeCache) if enabled else groups[0][0].grade_cache is None
        finally:
            for g in groups:
                g.close()
