"""``swebox eval`` with ``--samples N``, ``--best-of N --select RULE`` or ``--search beam --width W --depth D``.

Each task's attempts start from one prepared start state (forked sandboxes, :mod:`swebox.envs.search`); tasks
run ``--parallel`` at once. The report has pass@k (the unbiased estimator) for the k up to N, best-of-N's
resolved rate under the selection rule (the oracle rule is called the oracle wherever it is reported), and
what the search cost: sandboxes, forks and their time, turns, wall time. ``--out`` writes one trajectory
record per task (:func:`record`): the picked attempt as an episode, plus the whole search with its tree, which
``swebox view`` shows.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from swebox.envs.search import (
    BUILTIN_RULES,
    SearchBudget,
    SearchResult,
    beam,
    best_of_n_rate,
    mean_pass_at_k,
    report_ks,
    sample,
)
from swebox.trainers.run.trajectories import FORMAT_VERSION


def add_arguments(ev: argparse.ArgumentParser) -> None:
    """The search options of ``swebox eval``."""
    group = ev.add_argument_group("search at inference (docs/envs.md)")
    group.add_argument("--samples", type=int, default=0, metavar="N",
                       help="N attempts per task from one prepared start state: report pass@k for k <= N")
    group.add_argument("--best-of", type=int, default=0, metavar="N",
                       help="N attempts per task, keep the one --select picks: report best-of-N (and pass@k)")
    group.add_argument("--select", default="visible_tests", metavar="RULE",
                       help=f"how best-of-N and beam pick: {', '.join(BUILTIN_RULES)} (labelled the oracle: it "
                            "reads the hidden tests) or MODULE:FUNCTION (default visible_tests)")
    group.add_argument("--search", choices=("beam",), default=None,
                       help="branch mid-episode: a beam over tool calls (--width, --depth)")
    group.add_argument("--width", type=int, default=2, help="beam width: children per line and lines kept")
    group.add_argument("--depth", type=int, default=2, help="beam depth: turns at which lines branch")
    group.add_argument("--max-search-turns", type=int, default=0, help="turns per task over all its lines (0: none)")
    group.add_argument("--max-sandboxes", type=int, default=0, help="sandboxes alive at once per task (0: none)")
    group.add_argument("--search-wall-s", type=float, default=0.0, help="seconds per task's search (0: none)")


def wanted(args: argparse.Namespace) -> bool:
    """True when ``swebox eval`` was asked for a search rather than one episode per task."""
    return bool(args.samples or args.best_of or args.search)


def _check(args: argparse.Namespace) -> int:
    if sum(bool(x) for x in (args.samples, args.best_of, args.search)) > 1:
        raise SystemExit("--samples, --best-of and --search: expected one of them; found several")
    n = args.samples or args.best_of
    if not args.search and n < 1:
        raise SystemExit(f"--samples/--best-of: expected N >= 1; found {n}")
    if args.search and (args.width < 1 or args.depth < 0):
        raise SystemExit(f"--width/--depth: expected >= 1 and >= 0; found {args.width}, {args.depth}")
    return n


def label(args: argparse.Namespace) -> str:
    """What ``--out`` records were made by beyond the policy ('' for one episode per task): a rerun resumes
    only records of the same kind."""
    if args.search:
        return f" --search beam --width {args.width} --depth {args.depth} --select {args.select}"
    if args.best_of:
        return f" --best-of {args.best_of} --select {args.select}"
    return f" --samples {args.samples}" if args.samples else ""


def run(args: argparse.Namespace, tasks: list, reply_for: Callable[[Any], Callable], source: Any, econf: Any,
        echo=print, out: Any = None) -> list[SearchResult]:
    """Search every task; print the report; append each task's record to ``out`` (an
    :class:`~swebox.trainers.evaluation.eval_records.EvalOut`) as it ends. Tasks ``out`` already holds are not searched
    again; the report covers the tasks searched by this run."""
    from swebox.trainers.evaluation.eval_records import RecordsError, run_tasks

    n = _check(args)
    budget = SearchBudget(args.max_search_turns, args.max_sandboxes, args.search_wall_s)
    # pass@k needs no selection: the cheapest rule (a vote over diffs, no extra runs) fills the scores
    rule = args.select if args.best_of or args.search else "majority"

    def one(task) -> SearchResult:
        options = {"source": source, "config": econf, "rule": rule, "budget": budget}
        try:
            if args.search:
                return beam(task, reply_for(task), width=args.width, depth=args.depth, **options)
            return sample(task, n, reply_for(task), **options)
        except Exception as exc:  # one broken task must not end the evaluation; it counts as unresolved
            failed = SearchResult(task.instance_id, rule, rule == "oracle")
            failed.budgets_hit.append(f"error: {type(exc).__name__}: {exc}")
            return failed

    todo = out.todo(tasks) if out is not None else tasks
    done = run_tasks(todo, one, parallel=args.parallel, out=out, total=len(tasks), desc="eval search",
                     record=record)
    results = [done[t.instance_id] for t in todo]
    if out is not None:
        try:
            out.finish({r.task_id: record(r) for r in results}, [t.instance_id for t in tasks])
        except RecordsError as exc:
            raise SystemExit(f"swebox eval: {exc}") from None
    echo(report(results, args))
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
    return {"format": FORMAT_VERSION, "task_id": result.task_id, "instance_id": result.task_id,
            "reward": picked.reward if picked else 0.0, "resolved": bool(picked and picked.resolved),
            "failed": bool(error), "truncated": False, "error": error or (picked.error if picked else ""),
            "num_turns": len(turns), "reason": picked.reason if picked else "error", "prompt": result.prompt,
            "turns": turns, "diff": picked.diff if picked else "", "grade": picked.grade if picked else None,
            "metrics": {}, "total_s": result.wall_s, "messages": messages, "search": result.to_dict()}


def report(results: list[SearchResult], args: argparse.Namespace) -> str:
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
        lines.append("pass@k over " + f"{len(graded)} tasks: " + ", ".join(
            f"pass@{k} {mean_pass_at_k(counts, k):.3f}" for k in report_ks(n)))
    if (args.best_of or args.search) and results:
        label = "the ORACLE (hidden tests; research only)" if args.select == "oracle" else args.select
        what = f"beam width {args.width} depth {args.depth}" if args.search else f"best-of-{args.best_of}"
        rate = best_of_n_rate([r.picked_resolved for r in results])
        lines.append(f"{what}, selected by {label}: resolved {sum(r.picked_resolved for r in results)}/"
                     f"{len(results)} ({rate:.1%})")
    lines.append(f"sandboxes {sum(r.sandboxes for r in results)}, forks {sum(r.forks for r in results)} "
                 f"({sum(r.fork_s for r in results):.2f} s), turns {sum(r.turns for r in results)}, "
                 f"wall {sum(r.wall_s for r in results):.1f} s summed over tasks")
    return "\n".join(lines)
