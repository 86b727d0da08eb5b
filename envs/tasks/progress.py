"""Progress bars with an ETA for work that takes more than a few seconds (tqdm, on stderr).

A bar shows only when stderr is a terminal (tqdm's ``disable=None``): logs, pipes and tests get the command's
own lines and nothing else. Lines a command prints while a bar runs go through :func:`above` so that they land
above the bar instead of through it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


def bar(total: int, desc: str, unit: str, enabled: bool = True) -> Any:
    """A tqdm bar of ``total`` ``unit``s on stderr; off when not ``enabled`` or stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(
        total=total, desc=desc, unit=unit, file=sys.stderr, disable=None if enabled else True, dynamic_ncols=True
    )


@contextlib.contextmanager
def above() -> Iterator[None]:
    """Print inside this block without breaking a running bar (tqdm clears it, then redraws it)."""
    from tqdm import tqdm

    with tqdm.external_write_mode(file=sys.stdout):
        yield
