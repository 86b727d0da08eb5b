"""GRPO learns, with rewards from real sandboxed grading (e2e, CPU, minutes).

The environment: a fixture project ``shapes`` with four buggy functions, built into a real env layer
(a sandbox with /testbed in git and /venv with pytest). Four tasks, one per bug. Each task's prompt shows K = 4
candidate patches; one fixes the bug, the others do not. The policy (a tiny random transformer with the
builtin tokenizer) answers in one turn; its reply's first character, by code point modulo K, is its choice, so
a random policy picks about uniformly. The prompt shows each candidate by the line it adds. The reward is the
grade of the chosen patch: a real SWE episode
(``swebox.envs.episodes.groups.group`` -> ``SWEEpisode``) applies it with a bash command, submits, and the grader runs
the task's tests in a fresh sandbox. Grades are cached per (task, choice), so each of the 16 pairs is graded
for real once (for all seeds) and later identical answers reuse it.

It learns from every seed, not from a lucky one: the test runs three, and each run is reproducible. It was a
coin toss for two reasons. (1) Its outcome moved with machine load: two episodes ran at once, so how their
prompts were batched into one generate call, and thus which random numbers each sample drew, depended on
thread timing; here episodes run one at a time (rollout.max_parallel_episodes=1; sampling one token is cheap),
and a seed's reward curve is the same, loaded or idle. (2) At optim.lr=1e-2 about half the seeds failed
(4 of the first 5): one Adam step moved the tiny policy by up to 2.7 nats per token, so it sharpened onto
prompt-independent answers before it told the four prompts apart; a group whose 8 samples agree has zero
advantage, so a task collapsed onto a wrong candidate never got a signal again (plateaus at 0.75 or 0.5), and
a rare success of a near-deterministic policy gave an update that undid solved tasks (0.94 -> 0.5). At 3e-3,
12 of 14 seeds learned within 60 steps (the other two: plateaus at 0.75); an entropy bonus, a KL to the
reference, Dr. GRPO, a wider model or groups of 16 at 1e-2 each failed more.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from swebox.envs.episodes.episode import StepResult

from tests.trainers.shapes import BUGGY, ORDER, K

# ------------------------------------------------------------------------------------ the choice episode


class GradeCache:
    """(task, choice) -> reward, each computed once by a real episode: apply the patch, submit, grade."""

    def __init__(self, layers: list) -> None:
        self.layers = layers
        self.rewards: dict[tuple[str, int], float] = {}
        self.real_runs = 0
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._lock = threading.Lock()

    def reward(self, task, choice: int) -> tuple[float, dict]:
        from swebox.envs.episodes.groups import group

        key = (task.instance_id, choice)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key in self.rewards:
                return self.rewards[key], {}
            with group(task, 1, layers=self.layers, config={"max_turns": 3, "grade_timeout_s": 120}) as g:
                episode = g[0]
                episode.reset()
                command = f"cd /testbed && git apply /candidates/{task.instance_id}/{choice}.diff"
                applied = episode.step(f"```bash\n{command}\n```")
                assert not applied.done, applied.observation
                final = episode.step("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
            assert final.terminated and "error" not in final.info, final.info
            self.rewards[key] = final.reward
            self.real_runs += 1
            return final.reward, final.info.get("metrics", {})


def added_line(diff: str) -> str:
    return next(line[1:].strip() for line in diff.splitlines() if line.startswith("+ "))


class ChoiceEpisode:
    """Shows the task and its K candidates; the reply's first character (code point mod K) picks one."""

    def __init__(self, task, candidates: list[str], grades: GradeCache) -> None:
        self.task, self.candidates, self.grades = task, candidates, grades

    def submit_reply(self) -> None:  # no action style: an episode that fills the context ends unsubmitted
        return None

    def close(self) -> None:
        pass

    def reset(self):
        # each candidate is shown by its added line: a whole diff per candidate makes the prompts of the four tasks
        # differ in a small share of their tokens, which a tiny random model cannot pick up in minutes
        shown = "\n".join(f"{k}: {added_line(diff)}" for k, diff in enumerate(self.candidates))
        name = self.task.instance_id.removeprefix("shapes-")
        return [{"role": "user", "content": f"Candidates:\n{shown}\nWhich one fixes {name}?"}]

    def step(self, reply: str) -> StepResult:
        if not reply:
            return StepResult("", 0.0, True, False, {"metrics": {"env/resolved": 0.0}})
        reward, metrics = self.grades.reward(self.task, ord(reply[0]) % K)
        return StepResult("", reward, True, False, {"metrics": {**metrics, "env/resolved": reward}})


def _candidate_layer(tmp: Path, base, tasks, candidates) -> Path:
    """A layer holding /candidates/<task>/<k>.diff, outside /testbed so it is never part of a diff."""
    root = tmp / "candidates-layer"
    for task, name in zip(tasks, BUGGY, strict=True):
        folder = root / "candidates" / task.instance_id
        folder.mkdir(parents=True)
        for k, diff in enumerate(candidates[name]):
            (folder / f"{k}.diff").write_text(diff)
    return root


@pytest.fixture(scope="module")
def grades(shapes_env, tmp_path_factory):
    """One grade cache for all seeds: each (task, candidate) pair graded for real once, two at a time, up front."""
    from concurrent.futures import ThreadPoolExecutor

    layer, tasks, candidates = shapes_env
    cache = GradeCache([layer.path, _candidate_layer(tmp_path_factory.mktemp("cands"), layer, tasks, candidates)])
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda pair: cache.reward(*pair), [(t, k) for t in tasks for k in range(K)]))
    return cache


@pytest.mark.e2e
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_learns_to_pick_the_fix(shapes_env, grades, seed, tmp_path):
    from swebox.trainers.rl.trainer import Trainer
    from swebox.trainers.run.config import load_config
    from swebox.trainers.run.tracking import read_metrics

    layer, tasks, candidates = shapes_env
    by_id = {t.instance_id: (t, candidates[name]) for t, name in zip(tasks, BUGGY, strict=True)}

    def factory(task: dict, n: int):
        t, cands = by_id[task.instance_id]
        return [ChoiceEpisode(t, cands, grades) for _ in range(n)]

    cfg = load_config(
        "configs/grpo_tiny_cpu.yaml",
        [
            f"seed={seed}",
            "total_steps=60",
            f"logging.run_dir={tmp_path / 'run'}",
            "logging.wandb=disabled",
            "logging.progress=false",
            "generation.max_new_tokens=1",
            "generation.max_context_tokens=1024",
            "rollout.tasks_per_step=4",
            "rollout.group_size=8",
            "optim.lr=3e-3",
            "optim.mini_batches=2",
            "optim.micro_batch_size=16",
            "checkpoint.every_steps=0",
            "rollout.max_parallel_episodes=1",
        ],
    )
    trainer = Trainer(cfg, tasks=list(tasks), episode_factory=factory, echo=lambda *_: None)
    records = []
    while trainer.step_count < cfg.total_steps:
        records.append(trainer.step())
        last = trainer.last
        # advantages as the maths says: within each group mean 0, and std 1 unless all rewards are equal
        for g in last.group_ids.unique():
            members = last.group_ids == g
            adv, rew = last.advantages[members], last.rewards[members]
            assert abs(float(adv.mean())) < 1e-5
            if float(rew.std()) > 0:
                assert abs(float(adv.std()) - 1.0) < 1e-3
            else:
                assert bool((adv == 0).all())
        rec = records[-1]
        assert rec["policy/kl"] >= 0  # k3 is never negative; 0 on the first mini-batch, > 0 after an update
        assert 0.0 <= rec["policy/clip_frac"] <= 1.0
        if len(records) >= 5 and min(r["reward/mean"] for r in records[-3:]) >= 0.85:
            break
    trainer.close()
    curve = [round(r["reward/mean"], 3) for r in records]
    print(f"seed {seed}: reward/mean per step:", curve, "real gradings:", grades.real_runs)
    start = sum(curve[:3]) / 3
    end = sum(curve[-3:]) / 3
    assert start < 0.5, curve  # chance is about 1/K
    assert end >= 0.8, curve
    assert grades.real_runs == len(tasks) * K  # no seed graded anything twice
    # exactly one candidate per task resolves it, by real grading: the fix, at position ORDER[i][0]
    for i, t in enumerate(tasks):
        assert [grades.rewards[(t.instance_id, k)] for k in range(K)] == [float(k == ORDER[i][0]) for k in range(K)]
    logged = read_metrics(tmp_path / "run")
    assert [r["step"] for r in logged] == list(range(1, len(records) + 1))
    assert any(r["policy/kl"] > 0 for r in logged) and any(r["policy/clip_frac"] > 0 for r in logged)


class ReplyBackend:
    """A scripted policy: each episode (keyed by its prompt) replies with the texts given for its task, as tokens."""

    def __init__(self, tokenizer, replies: dict[str, list[str]]) -> None:
        self.tok, self.replies, self.seen = tokenizer, replies, {}
        self._lock = threading.Lock()

    def generate(self, prompts, max_new_tokens, seeds=None):
        from swebox.trainers.policy.generation import Generated

        out = []
        for prompt in prompts:
            text = self.tok.decode(prompt)
            with self._lock:
                key = next(k for k in self.replies if f"{k} returns the wrong value" in text)
                turn = text.count("<|im_start|>assistant") - 1
                self.seen.setdefault(key, []).append(list(prompt))
            ids = self.tok.encode(self.replies[key][turn], add_special_tokens=False) + [self.tok.eos_token_id]
            out.append(Generated(ids, [-0.25] * len(ids), "stop"))
        return out

    def update_weights(self, state):
        pass


@pytest.mark.e2e
def test_real_swe_episodes_multi_turn_alignment_and_rewards(shapes_env, tmp_path):
    """swe_episode_factory: groups forked from one start, three turns, real observations, real grading."""
    from swebox.trainers.policy.models import build_builtin_tokenizer
    from swebox.trainers.rl.rollout import RolloutWorker, observation_delta_ids, swe_episode_factory
    from swebox.trainers.run.config import load_config

    layer, tasks, _ = shapes_env
    layers = [layer.path, _candidate_layer(tmp_path, layer, tasks, shapes_env[2])]
    names = list(BUGGY)
    submit = "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"

    def apply(task_index: int, k: int) -> str:
        return f"```bash\ncd /testbed && git apply /candidates/{tasks[task_index].instance_id}/{k}.diff\n```"

    look = "```bash\ncd /testbed && git status --short && sed -n 1,3p shapes/ops.py\n```"
    replies = {
        names[0]: [look, apply(0, ORDER[0][0]), submit],  # the fix: resolved
        names[1]: [look, apply(1, (ORDER[1][0] + 1) % K), submit],
    }  # a wrong candidate: not resolved
    cfg = load_config(
        None,
        [
            "generation.max_context_tokens=4096",
            "generation.max_new_tokens=128",
            "env.max_turns=5",
            "rollout.max_parallel_episodes=2",
            "model.hidden_size=32",
            "model.num_layers=1",
            "model.num_heads=2",
            "model.num_kv_heads=2",
        ],
    )
    tok = build_builtin_tokenizer()
    worker = RolloutWorker(cfg, swe_episode_factory(cfg, layers=layers), tokenizer=tok)
    worker.backend = backend = ReplyBackend(tok, replies)
    trajs = worker.run(list(tasks[:2]), 2)
    assert [t.reward for t in trajs] == [1.0, 1.0, 0.0, 0.0], [t.error for t in trajs]
    assert not any(t.failed for t in trajs) and all(t.num_turns == 3 for t in trajs)
    assert len({t.group_id for t in trajs}) == 2
    for traj in trajs:
        assert len(traj.response_ids) == len(traj.loss_mask) == len(traj.old_logprobs)
        # model turns are exactly the scripted replies' tokens; the rest decodes to the chat template's deltas
        name = traj.task_id.removeprefix("shapes-")
        model = [t for t, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m]
        expected = [i for r in replies[name] for i in [*tok.encode(r, add_special_tokens=False), tok.eos_token_id]]
        assert model == expected
        assert {lp for lp, m in zip(traj.old_logprobs, traj.loss_mask, strict=True) if m} == {-0.25}
        text = tok.decode(traj.prompt_ids + traj.response_ids)
        assert text.count("<|im_start|>user") == 3 and "shapes/ops.py" in text  # the `look` output came back
        # each delta is what observation_delta_ids makes of that turn's observation
        runs, current = [], []
        for t, m in zip(traj.response_ids, traj.loss_mask, strict=True):
            if m == 0:
                current.append(t)
            elif current:
                runs.append(current)
                current = []
        observation = tok.decode(runs[0]).split("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        assert runs[0] == observation_delta_ids(tok, observation, ended_turn=True)
        assert traj.metrics["env/turns"] == 3.0 and traj.metrics["timing/grade_s"] > 0
    # turn 2 of each episode was prompted with turn 1's tokens as generated, then the delta (token in, token out)
    first = backend.seen[names[0]][0]
    second = min((p for p in backend.seen[names[0]] if len(p) > len(first)), key=len)
    turn0 = [*tok.encode(look, add_special_tokens=False), tok.eos_token_id]
    assert second[: len(first) + len(turn0)] == first + turn0
