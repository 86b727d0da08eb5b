from __future__ import annotations

import random
import threading
import time

import pytest
from swebox.envs.cache.budget import IOBudget, weight_mb


def test_weight_rounds_up_and_clamps():
    assert weight_mb(0, 2000) == 1
    assert weight_mb(1, 2000) == 1
    assert weight_mb(1_000_000, 2000) == 1
    assert weight_mb(1_000_001, 2000) == 2
    assert weight_mb(30_500_000, 2000) == 31
    assert weight_mb(5_000_000_000, 2000) == 2000  # bigger than the budget: runs alone
    with pytest.raises(ValueError, match="at least 1 MB"):
        weight_mb(1, 0)
    with pytest.raises(ValueError, match="budget_mb"):
        IOBudget(0)


def test_concurrent_holders_never_exceed_budget():
    budget = IOBudget(100)
    rng = random.Random(7)
    sizes = [rng.randint(1, 60) * 1_000_000 for _ in range(40)]
    lock, current, seen = threading.Lock(), [0], []
    # every holder is started before any asks: started one by one, each could finish its 10 ms hold before the
    # next one started on a loaded machine, and the holders never ran side by side
    go = threading.Event()

    def worker(nbytes: int) -> None:
        go.wait()
        with budget.hold(nbytes) as w:
            with lock:
                current[0] += w
                seen.append(current[0])
            time.sleep(0.01)
            with lock:
                current[0] -= w

    threads = [threading.Thread(target=worker, args=(s,)) for s in sizes]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    assert max(seen) <= 100 and budget.peak_mb <= 100
    assert budget.peak_mb > 60  # it really ran holders side by side
    assert budget.in_flight_mb == 0 and current[0] == 0


def test_oversized_archive_waits_for_an_empty_budget():
    budget = IOBudget(10)
    first = budget.acquire(4_000_000)
    done = threading.Event()
    threading.Thread(target=lambda: (budget.acquire(50_000_000), done.set()), daemon=True).start()
    assert not done.wait(0.1)  # 10 MB would exceed the 4 MB already in flight
    budget.release(first)
    assert done.wait(60) and budget.in_flight_mb == 10  # woken at once; the deadline is for a loaded machine
