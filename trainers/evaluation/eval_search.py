"""``swebox eval`` with ``--samples N``, ``--best-of N --select RULE`` or ``--search beam --width W --depth D``
(the flags are parsed by scripts/eval_cli.py into :class:`SearchOptions`).

Each task's attempts start from one prepared start state (forked sandboxes, :mod:`swebox.envs.search`); tasks
run ``--parallel`` at once. The report has pass@k (the unbiased estimator) for the k up to N, best-of-N's
resolved rate under the selection rule (the oracle rule is called the oracle wherever it is reported), and
what the search cost: sandboxes, forks and their time, turns, wall time. ``--out`` writes one trajectory
record per task (:func:`record`): the picked attempt as an episode, plus the whole search with its tree, which
``swebox view`` shows. With ``env.harness`` every attempt is a harness episode (an agent program's run,
:mod:`swebox.envs.search.harness_lines`) and beam forks by replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swebox.envs.search import (
    HarnessPolicy,
    SearchBudget,
    SearchResult,
    beam,
    beam_harness,
    best_of_n_rate,
    mean_pass_at_k,
    report_ks,
    sample,
    sample_harness,
)
from swebox.trainers.run.trajectories import FORMAT_VERSION


@dataclass(frozen=True)
class SearchOptions:
    """What ``swebox eval`` was asked to search (its flags, parsed by scripts/eval_cli.py)."""

    samples: int = 0
    """``--samples N``: N attempts per task from one prepared start state; pass@k for k <= N (0: not asked)."""
    best_of: int = 0
    """``--best-of N``: N attempts per task, the one ``select`` picks is the task's answer (0: not asked)."""
    select: str = "visible_tests"
    """How best-of-N and beam pick: a built-in rule (``oracle`` reads the hidden tests) or MODULE:FUNCTION."""
    search: str | None = None
    """``beam``: branch mid-episode over tool calls (``width``, ``depth``); None: no search."""
    width: int = 2
    """Beam width: children per line and lines kept."""
    depth: int = 2
    """Beam depth: turns at which lines branch."""
    max_search_turns: int = 0
    """Turns per task over all its lines (0: no limit)."""
    max_sandboxes: int = 0
    """Sandboxes alive at once per task (0: no limit)."""
    search_wall_s: float = 0.0
    """Seconds per task's search (0: no limit)."""
    parallel: int = 2
    """Tasks searched at once."""


def wanted(opts: SearchOptions) -> bool:
    """True when ``swebox eval`` was asked for a search rather than one episode per task."""
    return bool(opts.samples or opts.best_of or opts.search)


def _check(opts: SearchOptions) -> int:
    if sum(bool(x) for x in (opts.samples, opts.best_of, opts.search)) > 1:
        raise SystemExit("--samples, --best-of and --search: expected one of them; found several")
    n = opts.samples or opts.best_of
    if not opts.search and n < 1:
        raise SystemExit(f"--samples/--best-of: expected N >= 1; found {n}")
    if opts.search and (opts.width < 1 or opts.depth < 0):
        raise SystemExit(f"--width/--depth: expected >= 1 and >= 0; found {opts.width}, {opts.depth}")
    return n


def label(opts: SearchOptions) -> str:
    """What ``--out`` records were made by beyond the policy ('' for one episode per task): a rerun resumes
    only records of the same kind."""
    if opts.search:
        return f" --search beam --width {opts.width} --depth {opts.depth} --select {opts.select}"
    if opts.best_of:
        return f" --best-of {opts.best_of} --select {opts.select}"
    return f" --samples {opts.samples}" if opts.samples else ""


def run(
    opts: SearchOptions,
    tasks: list,
    reply_for: Callable[[Any], Callable],
    source: Any,
    econf: Any,
    echo=print,
    out: Any = None,
    harness_for: Callable[[Any], HarnessPolicy] | None = None,
) -> list[SearchResult]:
    """Search every task; print the report; append each task's record to ``out`` (an
    :class:`~swebox.trainers.evaluation.eval_records.EvalOut`) as it ends. Tasks ``out`` already holds are not searched
    again; the report covers the tasks searched by this run. ``harness_for``: with ``env.harness``, the task's
    harness lines' policy (``reply_for`` is not used then; beam forks by replay)."""
    from swebox.trainers.evaluation.eval_records import RecordsError, run_tasks

    n = _check(opts)
    budget = SearchBudget(opts.max_search_turns, opts.max_sandboxes, opts.search_wall_s)
    # pass@k needs no selection: the cheapest rule (a vote over diffs, no extra runs) fills the scores
    rule = opts.select if opts.best_of or opts.search else "majority"

    def one(task) -> SearchResult:
        options = {"source": source, "config": econf, "rule": rule, "budget": budget}
        try:
            if harness_for is not None:
                if opts.search:
                    return beam_harness(task, harness_for(task), width=opts.width, depth=opts.depth, **options)
                return sample_harness(task, n, harness_for(task), **options)
            if opts.search:
                return beam(task, reply_for(task), width=opts.width, depth=opts.depth, **options)
            return sample(task, n, reply_for(task), **options)
        except Exception as exc:  # one broken task must not end the evaluation; it counts as unresolved
            failed = SearchResult(task.instance_id, rule, rule == "oracle")
            failed.budgets_hit.append(f"error: {type(exc).__name__}: {exc}")
            return failed

    todo = out.todo(tasks) if out is not None else tasks
    done = run_tasks(todo, one, parallel=opts.parallel, out=out, total=len(tasks), desc="eval search", record=record)
    results = [done[t.instance_id] for t in todo]
    if out is not None:
        try:
            out.finish({r.task_id: record(r) for r in results}, [t.instance_id for t in tasks])
        except RecordsError as exc:
            raise SystemExit(f"swebox eval: {exc}") from None
    echo(report(results, opts))
    if out is not None and out.previous:
        echo(f"{len(tasks) - len(todo)} tasks recorded in {out.path} by an earlier run are not in this report")
    return results


def record(result: SearchResult) -> dict[str, Any]:
    """One ``--out`` line: the picked attempt in the episode fields of a trajectory record (its whole
    conversation through the tree: what the viewer lists and ``swebox sft`` reads), and ``search``: the
    search's result (attempts, costs, rule, ``oracle``, ``tree``, ``chosen``: docs/training.md)."""
    picked = result.attempts[result.picked] if result.picked >= 0 else None
    error = next((b.removeprefix("error: ") for b in result.budgets_hit if b.startswith("error: ")), "")
    turns = result.chosen_turns()
    # the chat as the picked line played it (swebox sft's input), as play_text_episode gives it: no observation
    # after the last reply, which ended the line
    messages = [dict(m) for m in result.prompt]
    for i, turn in enumerate(turns):
        messages.append({"role": "assistant", "content": turn["text"]})
        if i < len(turns) - 1:
            messages.append({"role": "user", "content": turn["observation"]})
    return {
        "format": FORMAT_VERSION,
        "task_id": result.task_id,
        "instance_id": result.task_id,
        "reward": picked.reward if picked else 0.0,
        "resolved": bool(picked and picked.resolved),
        "failed": bool(error),
        "truncated": False,
        "error": error or (picked.error if picked else ""),
        "num_turns": len(turns),
        "reason": picked.reason if picked else "error",
        "prompt": result.prompt,
        "turns": turns,
        "diff": picked.diff if picked else "",
        "grade": picked.grade if picked else None,
        "audit": picked.audit if picked else None,
        "metrics": {},
        "total_s": result.wall_s,
        "messages": messages,
        "search": result.to_dict(),
    }


def report(results: list[SearchResult], opts: SearchOptions) -> str:
    """The per-task lines and the summary of a search evaluation."""
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table("task", "attempts", "resolved", "picked", "notes", box=None, pad_edge=False)
    for r in results:
        picked = "-" if r.picked < 0 else ("yes" if r.picked_resolved else "no")
        table.add_row(r.task_id, str(len(r.attempts)), str(r.resolved_count), picked, ", ".join(r.budgets_hit))
    text = io.StringIO()
    Console(file=text, width=200, highlight=False).print(table)
    lines = [line.rstrip() for line in text.getvalue().splitlines()]
    graded = [r for r in results if r.attempts]
    n = min((len(r.attempts) for r in graded), default=0)
    if n:
        counts = [(len(r.attempts), r.resolved_count) for r in graded]
        lines.append(
            "pass@k over "
            + f"{len(graded)} tasks: "
            + ", ".join(f"pass@{k} {mean_pass_at_k(counts, k):.3f}" for k in report_ks(n))
        )
    if (opts.best_of or opts.search) and results:
        label = "the ORACLE (hidden tests; research only)" if opts.select == "oracle" else opts.select
        what = f"beam width {opts.width} depth {opts.depth}" if opts.search else f"best-of-{opts.best_of}"
        rate = best_of_n_rate([r.picked_resolved for r in results])
        lines.append(
            f"{what}, selected by {label}: resolved {sum(r.picked_resolved for r in results)}/"
            f"{len(results)} ({rate:.1%})"
        )
    replayed = sum(r.replayed for r in results)
    by_replay = f", {replayed} model calls replayed (their commands ran again)" if replayed else ""
    lines.append(
        f"sandboxes {sum(r.sandboxes for r in results)}, forks {sum(r.forks for r in results)} "
        f"({sum(r.fork_s for r in results):.2f} s{by_replay}), turns {sum(r.turns for r in results)}, "
        f"wall {sum(r.wall_s for r in results):.1f} s summed over tasks"
    )
    return "\n".join(lines)
