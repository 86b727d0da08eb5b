"""Task synthesis: real projects + procedural bugs -> validated SWE tasks (SWE-smith's recipe, offline).

For each project: build its environment, run the suite ``baseline_runs`` times and keep the tests that pass
every time; generate candidate bugs in the non-test modules; for each candidate, in a sandbox, write the
mutated module, run the test files that can reach it (hard timeout), and reset. A candidate becomes a task
when at least one stable test fails (FAIL_TO_PASS) and at least one passes (PASS_TO_PASS), and a second run
gives the same split. The task's ``patch`` is the fix (the reverse of the bug) and its starting state is a
task layer holding the buggy file as a new root commit (``base_commit``).

Validated tasks are appended to ``tasks.jsonl`` as they are found and rejected candidates to
``rejected.jsonl`` (journal.py), so a restart skips both and a crash keeps everything validated so far.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import queue
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from swebox.envs.tasks.graders.diff_parse import diff_lines
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.synth.journal import Journal
from swebox.envs.tasks.synth.languages import BugSite, Runner, bug_sites, grading_fields, make_runner
from swebox.envs.tasks.synth.mutations import Candidate
from swebox.envs.tasks.synth.reach import Reach
from swebox.envs.tasks.synth.recipe import ProjectRecipe, find_test_paths
from swebox.envs.tasks.synth.runner import RunResult
from swebox.envs.tasks.synth.statement import Failure, problem_statement
from swebox.envs.tasks.testids import file_of_test


@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """How much to synthesise and how."""

    out: str
    """Output folder: tasks.jsonl, rejected.jsonl and the layers the environment provider stores."""
    max_tasks: int | None = None
    """Validated tasks per project; None uses each project's recipe value."""
    jobs: int = 2
    """Sandboxes testing candidates at once (one thread each)."""
    seed: int = 0
    """Seed of the candidate order and of shuffle_statements."""
    baseline_runs: int = 3
    """Full-suite runs; only tests that pass in every one are used."""
    max_candidates: int = 0
    """Candidates tried per project at most (0: until max_tasks are found or candidates run out)."""
    min_timeout_s: float = 10.0
    """Lower bound of a mutant run's timeout (the bound is 10 x the baseline suite time otherwise)."""

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.baseline_runs < 1:
            raise ValueError(
                f"SynthConfig: expected jobs >= 1 and baseline_runs >= 1; found {self.jobs}, {self.baseline_runs}."
            )
        if self.max_tasks is not None and self.max_tasks < 0:
            raise ValueError(f"SynthConfig.max_tasks: expected >= 0 or None; found {self.max_tasks}.")
        if self.max_candidates < 0:
            raise ValueError(f"SynthConfig.max_candidates: expected >= 0; found {self.max_candidates}.")


class Environment(Protocol):
    """A built environment: what sandboxes start from, and how a task's own layer is made."""

    def sandbox(self) -> Any:
        """A started Sandbox over the env layer (the caller closes it)."""

    def task_layer(self, changes: dict[str, bytes], message: str) -> tuple[str, str]:
        """Store a task layer holding ``changes`` as a new root commit; returns (layer key, commit id)."""


@dataclasses.dataclass
class Outcome:
    """What validating one candidate found."""

    candidate: Candidate | None
    reason: str
    """'' for a valid bug, else why it was rejected (no-op, duplicate, timeout, no-failure, all-fail, flaky)."""
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    failures: tuple[Failure, ...] = ()


@dataclasses.dataclass
class ProjectReport:
    """Counts for one project."""

    label: str
    tasks: int = 0
    tried: int = 0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    stable_tests: int = 0
    error: str = ""
    seconds: float = 0.0


def fix_diff(path: str, buggy: str, fixed: str) -> str:
    """A git-style unified diff turning ``buggy`` into ``fixed`` (applies with ``git apply``)."""
    # git's lines (str.splitlines would also break at a form feed, which many old sources hold)
    lines = difflib.unified_diff(diff_lines(buggy), diff_lines(fixed), f"a/{path}", f"b/{path}", n=3)
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def interleave(items: Sequence[BugSite], seed: int) -> list[BugSite]:
    """Shuffle, then alternate techniques so a small budget still sees every kind of bug."""
    rng = random.Random(seed)
    buckets: dict[str, list[BugSite]] = {}
    for m in items:
        buckets.setdefault(m.technique, []).append(m)
    for bucket in buckets.values():
        rng.shuffle(bucket)
    out = []
    while any(buckets.values()):
        order = sorted(buckets)
        rng.shuffle(order)  # a fresh technique order each round: small budgets are not biased to 'a...'
        for name in order:
            if buckets[name]:
                out.append(buckets[name].pop())
    return out


def stable_tests(runs: Sequence[RunResult]) -> set[str]:
    """Tests that passed in every run."""
    passing = [r.passing() for r in runs]
    return set.intersection(*passing) if passing else set()


class ProjectSynth:
    """Synthesis for one project in one environment."""

    def __init__(
        self,
        recipe: ProjectRecipe,
        env: Environment,
        config: SynthConfig,
        journal: Journal,
        progress: Callable[[str, int], None] | None = None,
    ) -> None:
        self.recipe = recipe
        self.env = env
        self.config = config
        self.journal = journal
        self.progress = progress or (lambda _label, _n: None)
        self.report = ProjectReport(recipe.label)
        self._seen: set[str] = set()
        self._seen_lock = threading.Lock()

    @property
    def wanted(self) -> int:
        target = self.config.max_tasks if self.config.max_tasks is not None else self.recipe.max_tasks
        return max(0, target - self.journal.count(self.recipe.label))

    def run(self) -> ProjectReport:
        if self.wanted == 0:
            return self.report
        runners: queue.Queue[Runner] = queue.Queue()
        sandboxes = []
        try:
            for _ in range(self.config.jobs):
                sb = self.env.sandbox()
                sandboxes.append(sb)
                runners.put(make_runner(sb, self.recipe))
            first = runners.get()
            ok = self._prepare(first)
            runners.put(first)
            if ok:
                self._search(runners)
        finally:
            for sb in sandboxes:
                sb.close()
        return self.report

    # -- preparation ----------------------------------------------------------------------------------
    def _prepare(self, runner: Runner) -> bool:
        files = sorted(runner.files)
        self.originals: dict[str, str] = {}
        read = self._cached_reader(runner)
        self.tests = self.recipe.tests or find_test_paths(files, read)
        missing = [p for p in self.tests if not any(f == p or f.startswith(p.rstrip("/") + "/") for f in files)]
        if not self.tests or missing:
            found = find_test_paths(files, read)
            what = f"the tests {missing} are not in the repository" if missing else "no test files found"
            where = f"its tests are in {list(found)}" if found else "expected test_*.py files in a tests/ folder"
            self.report.error = f"{what}; {where}: set `tests:` in the recipe (or --tests)"
            return False
        runs = [runner.run({}, self.tests, self.recipe.timeout_s) for _ in range(self.config.baseline_runs)]
        if any(r.timed_out for r in runs):
            self.report.error = f"the clean suite timed out (> {self.recipe.timeout_s} s); raise timeout_s"
            return False
        self.stable = stable_tests(runs)
        self.report.stable_tests = len(self.stable)
        self.stable_files = {f for f in map(file_of_test, self.stable) if f is not None}
        self.defined_in = {t: f for r in runs for t, f in r.defined_in.items()}
        if not self.stable:
            statuses = {r.junit_status for r in runs}
            self.report.error = f"no test passes on the clean snapshot (JUnit: {sorted(statuses)}); check tests/"
            return False
        self.timeout_s = min(
            self.recipe.timeout_s, max(self.config.min_timeout_s, 10 * max(r.duration_s for r in runs))
        )
        self.reach = Reach(files, read, self.tests)
        self.files = files
        self.pool = interleave(bug_sites(self.recipe, files, read, self.config.seed), self.config.seed)
        return True

    def _cached_reader(self, runner: Runner) -> Callable[[str], str]:
        def read(rel: str) -> str:
            if rel not in self.originals:
                self.originals[rel] = runner.read_text(rel)
            return self.originals[rel]

        return read

    # -- search -----------------------------------------------------------------------------------------
    def _search(self, runners: queue.Queue) -> None:
        budget = self.config.max_candidates or len(self.pool)
        todo = iter(self.pool[:budget])
        with ThreadPoolExecutor(self.config.jobs, thread_name_prefix=f"synth-{self.recipe.name}") as pool:
            running: set[Future] = set()
            while True:
                while len(running) < 2 * self.config.jobs and self.wanted > 0:
                    mutation = next(todo, None)
                    if mutation is None:
                        break
                    running.add(pool.submit(self._validate_with, runners, mutation))
                if not running:
                    break
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    self._record(future.result())
            for future in running:
                future.cancel()

    def _validate_with(self, runners: queue.Queue, mutation: BugSite) -> Outcome:
        if self.wanted <= 0:
            return Outcome(None, "budget")
        runner = runners.get()
        try:
            return self.validate(runner, mutation)
        finally:
            runners.put(runner)

    def validate(self, runner: Runner, mutation: BugSite) -> Outcome:
        """Run one candidate twice; a valid bug splits the stable tests the same way both times."""
        candidate = mutation.candidate()
        if candidate is None:
            return Outcome(None, "no-op")
        with self._seen_lock:
            if candidate.key in self._seen or self.journal.seen(candidate.key):
                return Outcome(None, "duplicate")
            self._seen.add(candidate.key)
        if self.stable_files:
            # only files whose tests passed on the clean snapshot: others may not even collect (mypy cases)
            tests = [t for t in self.reach.tests_for(candidate.path) if t in self.stable_files] or sorted(
                self.stable_files
            )
            considered = {t for t in self.stable if file_of_test(t) in set(tests)}
        else:  # ids that name no pytest file (a log-graded runner's): the whole command, every stable test
            tests, considered = list(self.tests), set(self.stable)
        splits = []
        details: dict[str, tuple[str, str]] = {}
        for _ in range(2):
            result = runner.run({candidate.path: candidate.source}, tests, self.timeout_s)
            if result.timed_out:
                return Outcome(candidate, "timeout")
            passing = considered & result.passing()
            failing = considered - passing
            if not failing:
                return Outcome(candidate, "no-failure")
            if not passing:
                return Outcome(candidate, "all-fail")
            splits.append((frozenset(failing), frozenset(passing)))
            details = details or result.details
        if splits[0] != splits[1]:
            return Outcome(candidate, "flaky")
        failed, passed = splits[0]
        failures = tuple(Failure(t, *details[t]) for t in sorted(failed) if t in details)
        if not failures:
            return Outcome(candidate, "no-failure-details")
        return Outcome(candidate, "", tuple(sorted(failed)), tuple(sorted(passed)), failures)

    def _record(self, outcome: Outcome) -> None:
        candidate = outcome.candidate
        if candidate is None:
            if outcome.reason != "budget":
                self.report.tried += 1
                self.report.rejected[outcome.reason] = self.report.rejected.get(outcome.reason, 0) + 1
            return
        self.report.tried += 1
        if outcome.reason or self.wanted <= 0:
            reason = outcome.reason or "budget"
            self.report.rejected[reason] = self.report.rejected.get(reason, 0) + 1
            if outcome.reason not in ("duplicate", ""):
                self.journal.add_rejected(candidate.key, self.recipe.label, reason)
            return
        task = self.make_task(outcome)
        self.journal.add_task(task, candidate.key, self.recipe.label)
        self.report.tasks += 1
        self.progress(self.recipe.label, 1)

    def make_task(self, outcome: Outcome) -> Task:
        """The Task row of a validated bug (builds its task layer)."""
        c = outcome.candidate
        assert c is not None  # only an accepted outcome, which has its candidate, becomes a task
        original = self.originals.get(c.path)
        if original is None:
            raise RuntimeError(f"{c.path}: the original source was not read during preparation")
        patch = fix_diff(c.path, c.source, original)
        statement = problem_statement(self.recipe.label, outcome.failures, len(outcome.pass_to_pass), patch)
        layer_key, commit = self.env.task_layer(
            {c.path: c.source.encode("utf-8")}, f"{self.recipe.label}: synthesized snapshot"
        )
        tests = (*outcome.fail_to_pass, *outcome.pass_to_pass)
        # the files the ids name, and those their inherited tests are written in: both must stay pristine
        named = {file_of_test(t) for t in tests} | {self.defined_in[t] for t in tests if t in self.defined_in}
        files = sorted(f for f in named if f is not None)
        spec = self.recipe.env_spec()
        grading = grading_fields(self.recipe, self.files)  # JavaScript: the log grader, its parser, test folders
        return Task(
            instance_id=f"{self.recipe.label}.{c.technique}.{c.key[:10]}",
            repo=self.recipe.name,
            base_commit=commit,
            patch=patch,
            problem_statement=statement,
            version=self.recipe.task_version,
            FAIL_TO_PASS=outcome.fail_to_pass,
            PASS_TO_PASS=outcome.pass_to_pass,
            created_at=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
            env=spec,
            task_layer_key=layer_key,
            test_cmd=self.recipe.test_cmd(),
            test_files=grading.pop("test_files", tuple(files)),
            **grading,
            metadata={
                "synth": {
                    "project": self.recipe.label,
                    "technique": c.technique,
                    "qualname": c.qualname,
                    "path": c.path,
                    "start_line": c.start_line,
                    "end_line": c.end_line,
                    "candidate_key": c.key,
                    "seed": self.config.seed,
                }
            },
        )


def synthesize(
    recipes: Iterable[ProjectRecipe],
    config: SynthConfig,
    environment: Callable[[ProjectRecipe], Environment],
    progress: Callable[[str, int], None] | None = None,
) -> list[ProjectReport]:
    """Synthesise tasks for every project in turn; a project that fails to build is reported and skipped.

    An ``environment`` factory with a ``prepare(recipes, jobs)`` method (CacheEnvironments) first builds every
    project's environment, ``config.jobs`` at once."""
    import time

    journal = Journal(Path(config.out))
    recipes = list(recipes)
    prepare = getattr(environment, "prepare", None)
    if prepare is not None and len(recipes) > 1:
        prepare(recipes, config.jobs)
    reports = []
    for recipe in recipes:
        started = time.monotonic()
        try:
            env = environment(recipe)
            report = ProjectSynth(recipe, env, config, journal, progress).run()
        except Exception as exc:  # one broken project must not stop a corpus build
            report = ProjectReport(recipe.label, error=f"{type(exc).__name__}: {exc}")
        report.seconds = time.monotonic() - started
        reports.append(report)
    return reports
