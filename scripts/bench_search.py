"""What forking saves a search: a live episode forked at turn k against replaying its k turns in a fresh
sandbox, and N starts forked from one prepared start state against N cold starts.

For each task (layers from the layer store) the bench plays k scripted turns of the kind an agent takes (look
at the repository, run the task's tests, edit a file), then alternately, rep by rep:

- ``fork``: ``SWEEpisode.fork(1)`` of the live episode and the child's first command;
- ``replay``: a fresh sandbox over the prepared start, the same k turns again, and the first command.

And for N starts: ``forked`` starts N sandboxes over one prepared snapshot (the setup is done once);
``cold`` starts N sandboxes over the task's layers and prepares each (setup commands, hidden-test removal,
the base git tree). The table reports medians and their ratios. Usage: ``swebox bench search --tasks
runs/toolz/tasks.jsonl --store runs/toolz/layers``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import time

from swebox.envs.agent.formats import command_reply
from swebox.envs.episodes.episode import EpisodeConfig, SWEEpisode
from swebox.envs.episodes.episode_state import prepare_start
from swebox.envs.episodes.groups import prepare_group
from swebox.envs.episodes.layers_resolver import acquire_layers, close_shared_caches
from swebox.envs.sandbox import Sandbox
from swebox.scripts.bench_tasks import add_task_arguments, bench_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(
        parser, limit=3, limit_help="tasks to measure", reps=5, reps_help="repetitions per task and mode"
    )
    parser.add_argument("--turns", type=int, default=4, help="turns played before the fork (default 4)")
    parser.add_argument("--starts", type=int, default=8, help="N of the N-starts comparison (default 8)")
    parser.set_defaults(func=run)


def agent_turns(task, k: int) -> list[str]:
    """k bash_block replies: look around, run the task's tests, edit a file, in turn."""
    tests = " ".join(shlex.quote(f) for f in task.all_test_files())
    argv = shlex.join([task.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.pytest_options])
    cycle = [
        "cd /testbed && git status --short && ls",
        f"cd /testbed && {argv} {tests} 2>&1 | tail -n 3",
        "cd /testbed && echo '# note' >> README* 2>/dev/null; git diff --stat",
    ]
    return [command_reply(cycle[i % len(cycle)], "bash_block") for i in range(k)]


def _play(episode: SWEEpisode, replies: list[str]) -> None:
    for reply in replies:
        result = episode.step(reply)
        if result.terminated or result.truncated:
            raise SystemExit(f"{episode.task.instance_id}: the scripted turns ended the episode ({result.info})")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_task(task, layers: list, args: argparse.Namespace) -> dict[str, float]:
    config = EpisodeConfig(max_turns=args.turns + 10)
    policy = config.policy()
    start = prepare_group(task, layers, policy, config.setup_timeout_s)
    snapshot = start.layers[-1]
    snapshot.acquire()  # held across the reps (each rep's sandboxes come and go)
    replies = agent_turns(task, args.turns)
    times: dict[str, list[float]] = {"fork": [], "replay": [], "forked": [], "cold": []}
    try:
        parent = SWEEpisode(task, start, config, sandbox=Sandbox(list(start.layers), policy).start())
        parent.reset()
        _play(parent, replies)
        try:
            for _ in range(args.reps):

                def fork():
                    child = parent.fork(1)[0]
                    child.sandbox.exec("true")
                    child.close()

                def replay():
                    episode = SWEEpisode(task, start, config, sandbox=Sandbox(list(start.layers), policy).start())
                    episode.reset()
                    _play(episode, replies)
                    episode.sandbox.exec("true")
                    episode.close()

                def forked():
                    boxes = [Sandbox(list(start.layers), policy).start() for _ in range(args.starts)]
                    for box in boxes:
                        box.close()

                def cold():
                    for _ in range(args.starts):
                        with Sandbox(list(layers), policy) as box:
                            prepare_start(box, task, config.setup_timeout_s)

                for name, fn in (("fork", fork), ("replay", replay), ("forked", forked), ("cold", cold)):
                    times[name].append(_timed(fn))
        finally:
            parent.close()
    finally:
        snapshot.release()
    return {name: statistics.median(values) for name, values in times.items()}


def run(args: argparse.Namespace) -> int:
    tasks, source = bench_tasks(args)
    rows = []
    try:
        for task in tasks:
            with acquire_layers(task, source) as held:
                rows.append((task.instance_id, measure_task(task, list(held.paths), args)))
    finally:
        close_shared_caches()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.reps} reps per task; medians in ms")
    print(
        f"{'task':44} {'fork@' + str(args.turns):>9} {'replay':>9} {'ratio':>7} "
        f"{str(args.starts) + ' forked':>10} {str(args.starts) + ' cold':>9} {'ratio':>7}"
    )
    for task_id, t in rows:
        print(
            f"{task_id:44} {t['fork'] * 1e3:9.1f} {t['replay'] * 1e3:9.1f} {t['replay'] / t['fork']:6.1f}x "
            f"{t['forked'] * 1e3:10.1f} {t['cold'] * 1e3:9.1f} {t['cold'] / t['forked']:6.1f}x"
        )
    fork, replay = (statistics.median(t[k] for _, t in rows) for k in ("fork", "replay"))
    forked, cold = (statistics.median(t[k] for _, t in rows) for k in ("forked", "cold"))
    print(
        f"{'median over tasks':44} {fork * 1e3:9.1f} {replay * 1e3:9.1f} {replay / fork:6.1f}x "
        f"{forked * 1e3:10.1f} {cold * 1e3:9.1f} {cold / forked:6.1f}x"
    )
    return 0
