"""A port for a server that a test starts by number (a Ray head and its side ports, a registry).

Why not the number a bind to port 0 gives: that port is in the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default), and the test lets it go before the server binds
it; meanwhile any process's outgoing connection can be given it, which happens on a busy machine (Ray
alone opens hundreds). A port below that range is never handed to an outgoing connection, so only an
explicit bind can take it. 20000-32767 also stays clear of Ray's defaults (worker ports 10002-19999, GCS
6379, dashboard 8265). Both xdist workers draw at random, and each candidate is checked free by a bind.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32767
"""The range drawn from: above Ray's worker ports, below the ephemeral range."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port in [LOW, HIGH] that nothing holds now (a bind to it succeeds)."""
    draw = random.SystemRandom()  # not the tests' seeded ``random``: two workers must not draw alike
    for _ in range(200):
        port = draw.randint(LOW, HIGH)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {LOW}-{HIGH} on {host} after 200 draws")
