"""pass@k and best-of-N as SWE-bench papers report them: pure functions of counts.

pass@k is the probability that at least one of k samples drawn without replacement from n attempts, c of
which resolved the task, is a resolved one. The unbiased estimator (Chen et al., 2021, "Evaluating Large
Language Models Trained on Code") is

    pass@k = 1 - C(n - c, k) / C(n, k)

computed as the product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which never forms the binomials.
The per-task values are averaged over tasks for the overall number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``c`` resolved attempts among ``n`` (``1 <= k <= n``)."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k(n, c, k): expected whole numbers; found {n!r}, {c!r}, {k!r}")
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: expected 0 <= c <= n and 1 <= k <= n; found n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k holds a resolved attempt
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """pass@k averaged over tasks, from ``(n, c)`` per task; tasks with fewer than k attempts are an error."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise ValueError("mean_pass_at_k: expected at least one task's counts; found none")
    return sum(values) / len(values)


def report_ks(n: int) -> list[int]:
    """The k values a report shows for n attempts: 1, 2, 5, 10, 20, 50, 100 up to n, and n itself."""
    ks = [k for k in (1, 2, 5, 10, 20, 50, 100) if k <= n]
    return ks if n in ks else [*ks, n]


def best_of_n_rate(picked_resolved: Sequence[bool]) -> float:
    """The share of tasks whose selected attempt resolved (best-of-N's resolved rate)."""
    if not picked_resolved:
        raise ValueError("best_of_n_rate: expected at least one task; found none")
    return sum(bool(r) for r in picked_resolved) / len(picked_resolved)
