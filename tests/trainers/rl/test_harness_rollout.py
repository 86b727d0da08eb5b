"""Harness episodes for the trainer: the policy as the gateway's model, the calls merged into one trajectory
(sampled ids trained on, the harness's observations not), and a real tiny GRPO step on harness episodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from swebox.envs.gateway import CallRecord, Completion, OverLimit
from swebox.envs.gateway.scripted import ScriptedModel, giveup_replies, gold_replies
from swebox.trainers.policy.generation import Generated
from swebox.trainers.policy.models import build_builtin_tokenizer
from swebox.trainers.rl.harness_rollout import PolicyModel, trajectory_of
from swebox.trainers.rl.rollout import encode, render

from tests.calc import GOLD

TOK = build_builtin_tokenizer()
SYSTEM = {"role": "system", "content": "Reply with one bash block."}
TASK = {"role": "user", "content": "add(2, 3) returns -1 instead of 5."}


class Fixed:
    """Samples the ids of ``text`` (then the end of turn) with logprob -0.25 each; remembers what it was asked."""

    def __init__(self, *texts: str) -> None:
        self.texts, self.asked = list(texts), []

    def generate(self, prompts, max_new_tokens, seeds=None):
        self.asked.append((prompts[0], max_new_tokens, seeds))
        ids = [*encode(TOK, self.texts.pop(0)), TOK.eos_token_id]
        return [Generated(ids, [-0.25] * len(ids), "stop")]


def call(model, index, messages):
    return CallRecord(index, messages, model.complete(messages, None, 9 + index, {}), 0.0, 0.1)


def test_the_policy_answers_with_the_template_s_ids_and_its_sampled_ids():
    backend = Fixed("ls")
    model = PolicyModel(backend, TOK, max_new_tokens=32, max_context_tokens=4096)
    out = model.complete([SYSTEM, TASK], max_tokens=8, seed=4, request={})
    assert out.prompt_ids == encode(TOK, render(TOK, [SYSTEM, TASK], add_generation_prompt=True))
    assert TOK.decode(out.token_ids, skip_special_tokens=True) == out.text == "ls"
    assert out.logprobs == [-0.25] * len(out.token_ids) and out.template == TOK.chat_template
    assert backend.asked == [(out.prompt_ids, 8, [4])]
    with pytest.raises(OverLimit, match="max_context_tokens"):
        PolicyModel(Fixed("x"), TOK, 32, max_context_tokens=5).complete([SYSTEM, TASK], None, None, {})


def test_calls_that_extend_each_other_merge_into_one_sequence_with_the_sampled_ids_trained_on():
    model = PolicyModel(Fixed("ls", "cat a.py", "submit"), TOK, 32, 4096)
    first = call(model, 0, [SYSTEM, TASK])
    second_messages = [SYSTEM, TASK, {"role": "assistant", "content": "ls"}, {"role": "user", "content": "a.py"}]
    second = call(model, 1, second_messages)
    third = call(
        model,
        2,
        [
            *second_messages,
            {"role": "assistant", "content": "cat a.py"},
            {"role": "user", "content": "def add(a, b): return a - b"},
        ],
    )
    traj, unmerged = trajectory_of([first, second, third], TOK, "t", "g")
    assert unmerged == 0 and traj.num_turns == 3
    assert traj.prompt_ids == first.completion.prompt_ids
    # the whole sequence is the last prompt followed by the last reply: nothing lost, nothing re-tokenised
    assert traj.prompt_ids + traj.response_ids == third.completion.prompt_ids + third.completion.token_ids
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
    assert sampled == first.completion.token_ids + second.completion.token_ids + third.completion.token_ids
    assert sum(traj.old_logprobs) == pytest.approx(-0.25 * len(sampled))


def test_a_call_that_rewrites_history_ends_the_chain_and_is_counted():
    model = PolicyModel(Fixed("ls", "cat a.py"), TOK, 32, 4096)
    first = call(model, 0, [SYSTEM, TASK])
    rewritten = call(
        model, 1, [SYSTEM, TASK, {"role": "assistant", "content": "(summarised)"}, {"role": "user", "content": "go on"}]
    )
    refused = CallRecord(2, [SYSTEM], None, 0.0, 0.0, "limit_exceeded: calls")
    traj, unmerged = trajectory_of([first, rewritten, refused], TOK, "t", "g")
    assert unmerged == 1 and traj.num_turns == 1 and sum(traj.loss_mask) == len(first.completion.token_ids)


def test_a_model_without_tokens_gives_a_trajectory_with_nothing_to_train_on():
    records = [CallRecord(0, [SYSTEM, TASK], Completion(text="ls"), 0.0, 0.0)]
    traj, unmerged = trajectory_of(records, None, "t", "g")
    assert (traj.response_ids, traj.num_turns, unmerged) == ([], 1, 1)


def test_scripted_records_hold_ids_that_decode_to_the_replies():
    model = ScriptedModel(gold_replies(GOLD), TOK)
    out = model.complete([SYSTEM, TASK], None, None, {})
    assert TOK.decode(out.token_ids) == gold_replies(GOLD)[0]
    assert TOK.decode(out.prompt_ids) == render(TOK, [SYSTEM, TASK], add_generation_prompt=True)


# ------------------------------------------------------------------------- a real GRPO step, tiny agent


class GoldOrGiveUp:
    """Even-numbered episodes of a group fix the bug, odd ones give up: the group's rewards differ."""

    def __init__(self) -> None:
        self.started = 0

    def generate(self, prompts, max_new_tokens, seeds=None):
        text = TOK.decode(prompts[0])
        turn = text.count("<|im_start|>assistant") - 1
        if turn == 0:
            self.started += 1
            plan = gold_replies(GOLD) if self.started % 2 else giveup_replies()
            self.plan = plan
        else:
            plan = gold_replies(GOLD)
        reply = plan[min(turn, len(plan) - 1)]
        ids = [*encode(TOK, reply), TOK.eos_token_id]
        return [Generated(ids, [-0.5] * len(ids), "stop")]

    def update_weights(self, state):
        pass


def test_a_grpo_step_on_harness_episodes(tmp_path: Path, calc_layer, tiny_agent_install):
    from swebox.envs.tasks import save_jsonl
    from swebox.trainers.policy.models import build_model, build_tokenizer
    from swebox.trainers.rl.rollout import LocalWorkerPool, swe_episode_factory
    from swebox.trainers.rl.trainer import Trainer
    from swebox.trainers.run.config import load_config

    from tests.calc import calc_task
    from tests.trainers.tiny_run import SMALL

    tasks = tmp_path / "tasks.jsonl"
    save_jsonl([calc_task()], tasks)
    cfg = load_config(
        None,
        [
            *SMALL,
            f"logging.run_dir={tmp_path / 'run'}",
            f"env.tasks={tasks}",
            "rollout.tasks_per_step=1",
            "rollout.group_size=2",
            "rollout.max_parallel_episodes=1",
            f"env.harness=command:python3 {tiny_agent_install}/tiny_agent.py",
            f"env.harness_install={tiny_agent_install}",
            "env.harness_max_calls=4",
        ],
    )
    tokenizer = build_tokenizer(cfg.model)
    pool = LocalWorkerPool(
        cfg, swe_episode_factory(cfg, layers=[calc_layer]), model=build_model(cfg.model, tokenizer), tokenizer=tokenizer
    )
    backend = GoldOrGiveUp()
    pool.worker.backend = backend
    trainer = Trainer(cfg, pool, echo=lambda *_: None)
    metrics = trainer.step()
    assert metrics["reward/mean"] == 0.5 and metrics["env/errors"] == 0.0 and backend.started == 2
    trajs = trainer.last.trajectories
    assert sorted(t.reward for t in trajs) == [0.0, 1.0] and not any(t.failed for t in trajs)
    for traj in trajs:  # each episode's calls merged: the sampled replies trained on, the observations not
        assert traj.metrics["gateway/unmerged_calls"] == 0.0 and traj.num_turns == traj.metrics["gateway/calls"]
        assert 0 < sum(traj.loss_mask) < len(traj.response_ids) or traj.num_turns == 1
    assert metrics["policy/grad_norm"] > 0  # the update ran on the merged sequences


def test_swebox_eval_with_a_harness_pays_gold_and_not_giveup_and_sft_keeps_the_resolved(
    shapes_env, tmp_path, capsys, tiny_agent_install
):
    import argparse
    import json

    from swebox.scripts.train_cli import add_arguments
    from swebox.trainers.finetune.sft_data import read_records, record_trajectories
    from swebox.trainers.policy.models import build_tokenizer
    from swebox.trainers.run.config import load_config

    from tests.trainers.shapes import shapes_files

    parser = argparse.ArgumentParser(prog="swebox")
    add_arguments(parser.add_subparsers(dest="command"))
    dirs = shapes_files(shapes_env, tmp_path, 2)
    harness = [
        "--harness",
        f"command:python3 {tiny_agent_install}/tiny_agent.py",
        "--harness-install",
        tiny_agent_install,
    ]
    for policy, expected in (("gold", "resolved 2/2"), ("giveup", "resolved 0/2")):
        out = tmp_path / f"{policy}.jsonl"
        args = parser.parse_args(
            [
                "eval",
                "--tasks",
                str(tmp_path / "tasks.jsonl"),
                "--policy",
                policy,
                "--layers",
                str(dirs),
                "--out",
                str(out),
                *harness,
            ]
        )
        assert args.func(args) == 0
        printed = capsys.readouterr().out
        assert expected in printed and "errors 0" in printed, printed
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert all(r["metrics"]["gateway/calls"] == (2.0 if policy == "gold" else 1.0) for r in rows)
        assert all(sum(r["loss_mask"]) == r["num_model_tokens"] > 0 for r in rows)
        # the viewer's turns: each reply's commands as its action, what the harness sent back as its observation
        first = rows[0]["turns"][0]
        command = first["action"]["arguments"]["command"]
        assert first["action"]["tool"] == "bash" and not first["format_error"]
        assert ("git apply" if policy == "gold" else "COMPLETE_TASK_AND_SUBMIT") in command
        if policy == "gold":
            assert first["observation"].startswith("<returncode>0</returncode>")
    cfg = load_config(None, [])
    kept, report = record_trajectories(
        read_records(tmp_path / "gold.jsonl") + read_records(tmp_path / "giveup.jsonl"), build_tokenizer(cfg.model), cfg
    )
    assert len(kept) == 2 and all(t.reward == 1.0 for t in kept), str(report)


def test_sft_trains_on_a_resolved_harness_episode_whose_model_gave_no_token_ids(calc_layer, tiny_agent_install):
    """A served model (``--policy openai:...``) gives text only: the record keeps the first call's messages and
    each call's reply and observation, and SFT rebuilds the conversation from them; a given-up episode is left."""
    from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
    from swebox.envs.episodes.episode_state import StartState
    from swebox.envs.gateway.harness import HarnessConfig, episode_config
    from swebox.trainers.finetune.sft_data import record_trajectories
    from swebox.trainers.rl.harness_rollout import play_harness_episode
    from swebox.trainers.run.config import load_config
    from swebox.trainers.run.trajectories import episode_fields

    from tests.calc import calc_task

    harness = HarnessConfig(harness=f"command:python3 {tiny_agent_install}/tiny_agent.py", install=tiny_agent_install)
    records = []
    for replies in (gold_replies(GOLD), giveup_replies()):
        episode = SWEEpisode(
            calc_task(),
            StartState([calc_layer], [calc_layer]),
            episode_config(EpisodeConfig(time_limit_s=300), harness),
        )
        try:
            traj = play_harness_episode(episode, ScriptedModel(replies), None, harness, "calc", "calc", seed=1)
        finally:
            episode.close()
        assert traj.response_ids == [] and not traj.failed  # nothing to train on as tokens
        records.append({**episode_fields(traj), "instance_id": f"calc-{len(records)}"})
    assert [r["resolved"] for r in records] == [True, False]
    kept, report = record_trajectories(records, TOK, load_config(None, []))
    assert [t.task_id for t in kept] == ["calc-0"] and report.dropped == {"not resolved": 1}
    sampled = [i for i, m in zip(kept[0].response_ids, kept[0].loss_mask, strict=True) if m]
    assert TOK.decode(sampled) == TOK.eos_token.join(gold_replies(GOLD)) + TOK.eos_token
    assert TOK.decode(kept[0].prompt_ids) == render(TOK, records[0]["prompt"], add_generation_prompt=True)


class CutFirst(Fixed):
    """As Fixed, but the first reply is cut at its budget: no end of turn sampled, finish_reason "length"."""

    def generate(self, prompts, max_new_tokens, seeds=None):
        (out,) = super().generate(prompts, max_new_tokens, seeds)
        if len(self.asked) == 1:
            return [Generated(out.token_ids[:-1], out.logprobs[:-1], "length")]
        return [out]


def test_a_reply_cut_at_its_budget_gets_the_end_of_turn_the_template_writes_unsampled():
    model = PolicyModel(CutFirst("ls -la", "cat a.py"), TOK, 32, 4096)
    first = call(model, 0, [SYSTEM, TASK])
    assert first.completion.finish_reason == "length" and TOK.eos_token_id not in first.completion.token_ids
    second = call(
        model, 1, [SYSTEM, TASK, {"role": "assistant", "content": "ls -la"}, {"role": "user", "content": "a"}]
    )
    traj, unmerged = trajectory_of([first, second], TOK, "t", "g")
    assert unmerged == 0
    assert traj.prompt_ids + traj.response_ids == second.completion.prompt_ids + second.completion.token_ids
    at = len(first.completion.token_ids)  # the end of turn after the cut reply: not sampled, not trained on
    assert traj.response_ids[at] == TOK.eos_token_id and traj.loss_mask[at] == 0
