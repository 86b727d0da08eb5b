"""Closing sandboxes off the caller's thread: `Sandbox.close(wait=False)`.

A close tells nsinit to stop at once (its control socket closes) and hands the rest to one background thread:
waiting for nsinit's exit, removing the cgroups and the working folder, and giving back the id slot and the
layer references. `wait_for_closes()` waits until every close handed over has finished; it also runs at
interpreter exit, so nothing is left behind by a program that ends right after closing.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
from collections.abc import Callable

_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_idle = threading.Condition()
_pending = 0
_worker: threading.Thread | None = None


def submit(finish: Callable[[], None]) -> None:
    """Run `finish` on the background thread (started on first use)."""
    global _pending, _worker
    with _idle:
        _pending += 1
        if _worker is None:
            _worker = threading.Thread(target=_work, name="swebox-sandbox-closer", daemon=True)
            _worker.start()
    _jobs.put(finish)


def _work() -> None:
    global _pending
    while True:
        finish = _jobs.get()
        try:
            finish()
        except Exception as exc:  # one sandbox's failed cleanup must not stop the others'
            print(
                f"swebox: closing a sandbox in the background failed: {type(exc).__name__}: {exc}",
                file=sys.stderr,
                flush=True,
            )
        finally:
            with _idle:
                _pending -= 1
                _idle.notify_all()


def wait_for_closes(timeout_s: float | None = None) -> bool:
    """Wait until every `close(wait=False)` so far has finished; False if `timeout_s` passed first."""
    with _idle:
        return _idle.wait_for(lambda: _pending == 0, timeout_s)


def _forget_after_fork() -> None:
    """A forked child has no worker thread; its parent's pending closes are the parent's."""
    global _idle, _jobs, _pending, _worker
    _idle, _jobs, _pending, _worker = threading.Condition(), queue.SimpleQueue(), 0, None


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(wait_for_closes)
