"""Concurrent ``generate`` calls gathered into one engine call (:class:`RequestBatcher`), for the transformers backend
(trainers/policy/backends.py) and the shared generation servers (trainers/policy/gen_server.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from swebox.trainers.policy.generation_api import Generated


@dataclass
class _Request:
    prompts: list[list[int]]
    max_new_tokens: int
    seeds: list[int] | None
    done: threading.Event = field(default_factory=threading.Event)
    arrived: float = field(default_factory=time.monotonic)
    result: list[Generated] | None = None
    error: BaseException | None = None


class RequestBatcher:
    """Runs concurrent ``generate`` calls together: whoever gets the engine takes what is pending.

    No extra thread: a caller queues its request and then either finds it answered or runs one batch of pending
    requests itself. One call for 8 prompts costs far less than 8 calls for 1 (2.9 ms a token against 8 x 0.8 ms
    for the demo's policy on a CPU), so a batch waits for company first, in one of two ways:

    - ``lockstep`` (``generation.batching: lockstep``): a batch runs when every caller it was told to expect
      (:meth:`join`, until that caller's :meth:`leave`) has a request pending, however long that takes, and holds
      all of them, ordered by their seeds (arrival order for requests without). The episodes then ask in rounds,
      each round's batches are a function of which episodes are still playing, never of the machine's timing,
      and so are the padded shapes and the floating-point numbers of every token. The engine call is split
      into chunks of ``max_batch`` prompts by the backend.
    - ``window``: a batch runs when every expected caller or ``max_batch`` prompts are pending, but never later
      than ``wait_s`` after the oldest pending request arrived (dynamic batching with a queue delay, as in
      Triton's ``max_queue_delay``), and holds the oldest requests up to ``max_batch`` prompts. More throughput
      when episodes' commands take very different times; which requests share a batch depends on timing.
    """

    def __init__(self, run, max_batch: int, wait_s: float = 0.0, lockstep: bool = False) -> None:
        self._run = run  # (prompts, max_new_tokens, seeds | None) -> list[Generated]
        self._max_batch = max_batch
        self._wait_s = wait_s
        self._lockstep = lockstep
        self._expected = 0  # callers that will ask again (join - leave)
        self._pending: list[_Request] = []
        self._running = False  # a caller is gathering or running a batch
        # guards the fields above; notified on every new request, every leave and every batch's end
        self._state = threading.Condition(threading.Lock())

    def join(self, callers: int = 1) -> None:
        """``callers`` more callers (episodes in flight) will call :meth:`submit` until each calls :meth:`leave`."""
        with self._state:
            self._expected += callers

    def leave(self) -> None:
        """One joined caller will ask no more."""
        with self._state:
            self._expected = max(0, self._expected - 1)
            self._state.notify_all()

    def submit(self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None) -> list[Generated]:
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(
                f"generate: expected one seed per prompt; found {len(seeds)} seeds for {len(prompts)} prompts"
            )
        request = _Request(prompts, max_new_tokens, seeds)
        with self._state:
            self._pending.append(request)
            self._state.notify_all()
            # a caller whose request another caller's batch answered returns at once (it never queues for the
            # engine behind a batch that is still gathering: that batch may be waiting for this very caller)
            while not request.done.is_set():
                if self._running:
                    self._state.wait()
                    continue
                self._running = True
                self._wait_for_company()
                taken = self._take()
                self._state.release()  # the engine runs without the lock: others queue meanwhile
                try:
                    self._run_batch(taken)
                finally:
                    self._state.acquire()
                    self._running = False
                    self._state.notify_all()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _wait_for_company(self) -> None:
        """(Lock held.) Lockstep: wait until every expected caller has a request pending. Window: until the
        expected callers (or ``max_batch`` prompts) are pending, or the oldest pending request has waited
        ``wait_s``."""
        if self._lockstep:
            while len(self._pending) < self._expected:
                self._state.wait()
            return
        while self._pending:
            enough = min(self._max_batch, self._expected) if self._expected else self._max_batch
            left = self._pending[0].arrived + self._wait_s - time.monotonic()
            if left <= 0 or sum(len(r.prompts) for r in self._pending) >= enough:
                return
            self._state.wait(left)

    def _take(self) -> list[_Request]:
        """(Lock held.) Lockstep: every pending request, by seed. Window: the oldest pending requests, up to
        ``max_batch`` prompts (at least one request)."""
        if self._lockstep:
            taken = sorted(self._pending, key=lambda r: r.seeds or [])  # stable: unseeded ones keep arrival order
            self._pending.clear()
            return taken
        taken, size = [], 0
        while self._pending and (not taken or size + len(self._pending[0].prompts) <= self._max_batch):
            size += len(self._pending[0].prompts)
            taken.append(self._pending.pop(0))
        return taken

    def _run_batch(self, taken: list[_Request]) -> None:
        if not taken:
            return
        prompts = [p for r in taken for p in r.prompts]
        seeded = all(r.seeds is not None for r in taken)
        seeds = [s for r in taken for s in r.seeds or []] if seeded else None
        # one engine call for all; a request with a smaller limit is cut afterwards: the tokens up to its
        # limit are samples of the same distribution either way
        longest = max(r.max_new_tokens for r in taken)
        try:
            outputs = self._run(prompts, longest, seeds)
        except BaseException as exc:
            for r in taken:
                r.error = exc
                r.done.set()
            return
        start = 0
        for r in taken:
            r.result = [_cut(g, r.max_new_tokens) for g in outputs[start : start + len(r.prompts)]]
            start += len(r.prompts)
            r.done.set()


def _cut(generated: Generated, limit: int) -> Generated:
    if len(generated.token_ids) <= limit:
        return generated
    return Generated(generated.token_ids[:limit], generated.logprobs[:limit], "length")
