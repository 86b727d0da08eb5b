"""``swebox tasks calibrate TASKS --out FILE --policy POLICY --policy-runs 3``: play a policy K times a task.

The glue between the calibration (envs/tasks/calibrate.py, which knows nothing of policies) and the episodes
``swebox eval`` plays (scripts/eval_policies.py): the same policies (gold, empty, hf:MODEL_FOLDER, openai:URL), the
same episode config (``--config`` and overrides), real episodes in fresh sandboxes graded as in training. Each
task's count goes into its calibration as ``policy: {"name", "resolved", "runs", "errors"}``; a run that could not
be played (an exception) counts as played and not resolved, and ``errors`` says how many there were.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from swebox.envs.tasks.calibrate import TaskCalibration
from swebox.envs.tasks.schema import Task


def policy_player(policy: str, cfg: Any, model: str = ""):
    """``play(episode, task, run) -> resolved`` for ``policy`` (as ``swebox eval --policy``), built once."""
    from swebox.scripts import eval_policies

    if policy.startswith("hf:"):
        import dataclasses

        from swebox.trainers.policy.generation import make_backend
        from swebox.trainers.policy.models import build_model, build_tokenizer
        from swebox.trainers.policy.sampling import sample_seed
        from swebox.trainers.rl.rollout import play_episode

        mcfg = dataclasses.replace(cfg.model, init="pretrained", path=policy[3:], tokenizer="")
        tokenizer = build_tokenizer(mcfg)
        backend = make_backend(cfg.generation, build_model(mcfg, tokenizer).eval(), tokenizer)

        def play_hf(episode: Any, task: Task, run: int) -> bool:
            # each run its own sampling stream, so K runs are K samples of the policy, not one sample K times
            traj = play_episode(
                episode,
                backend,
                tokenizer,
                cfg,
                task.instance_id,
                task.instance_id,
                seed=sample_seed(cfg.seed, f"calibrate-{run}", task.instance_id),
            )
            return bool(traj.metrics.get("env/resolved", 0.0))

        return play_hf
    replies_for = eval_policies.text_policy(argparse.Namespace(policy=policy, model=model), cfg)

    def play_text(episode: Any, task: Task, run: int) -> bool:
        rec = eval_policies.play_text_episode(episode, replies_for(task), cfg.env.max_turns)
        if rec["error"]:
            raise RuntimeError(rec["error"])
        return bool(rec["resolved"])

    return play_text


def policy_config(args: argparse.Namespace) -> Any:
    """The episodes' config (``--config``, ``--set``), checked with the policy before any grading starts: a wrong
    flag fails in a second, not after minutes of gold and empty grades."""
    from swebox.scripts.eval_policies import check_hf_folder, check_policy
    from swebox.trainers.run.config import ConfigError, load_config

    check_policy(args.policy)
    if args.policy.startswith("hf:"):
        check_hf_folder(args.policy[3:])
    cfg = load_config(args.config, list(args.overrides))
    if cfg.env.harness:  # a harness plays through its own gateway loop (swebox eval --harness); not wired here
        raise ConfigError(
            f"swebox tasks calibrate --policy: expected the text loop (env.harness empty); found "
            f"env.harness={cfg.env.harness!r}; calibrate with a text policy"
        )
    return cfg


def play_policy(
    tasks: list[Task], results: list[TaskCalibration], args: argparse.Namespace, cfg: Any, echo=print
) -> None:
    """Play ``args.policy`` ``args.policy_runs`` times on each task (episodes as ``cfg`` says: :func:`policy_config`)
    and set each calibration's ``policy`` entry."""
    from swebox.envs.episodes.groups import group
    from swebox.envs.episodes.layers_resolver import LayerSource
    from swebox.envs.tasks.calibrate import policy_row

    plain = not (Path(args.layers) / "manifests").is_dir()
    source = LayerSource(
        store="" if plain else args.layers,
        dirs=args.layers if plain else "",
        cache_root=cfg.env.cache_dir,
        tasks_file=str(args.tasks),
    )
    play = policy_player(args.policy, cfg, args.model)
    econf = cfg.env.episode()
    width = max([40, *(len(t.instance_id) for t in tasks)])
    for task, cal in zip(tasks, results, strict=True):
        resolved = errors = 0
        for run in range(args.policy_runs):
            try:
                with group(task, 1, source=source, config=econf) as g:
                    resolved += play(g[0], task, run)
            except Exception as exc:  # one broken episode must not end the calibration; it is counted
                errors += 1
                print(f"{task.instance_id}: policy run {run + 1}: {type(exc).__name__}: {exc}"[:500], file=sys.stderr)
        cal.policy = {"name": args.policy, "resolved": resolved, "runs": args.policy_runs, "errors": errors}
        echo(policy_row(cal, width))
    runs = sum(c.policy["runs"] for c in results if c.policy)
    won = sum(c.policy["resolved"] for c in results if c.policy)
    echo(f"policy {args.policy}: resolved {won} of {runs} runs over {len(results)} tasks")
