"""``runner_origins.watch_returns`` under each interpreter the runner runs on (pyenv's 3.7-3.13, and this one):
a frame of a watched code (the def, a layer) that returns counts, one that unwinds does not, nor a call that never
reaches it. The grading path that uses it is proved end to end in test_redteam_round3.py (``mock.patch``) and
test_watch_hypothesis.py (``@given``); this pins the bytecode facts it rests on (which instruction a frame ends
on) for every version, most of which no calc grade runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swebox.envs.tasks.graders import runner_origins

from tests.pyenv_python import PYENV

SCRIPT = r"""
import importlib.util, json, sys, threading
spec = importlib.util.spec_from_file_location("runner_origins", sys.argv[1])
origins = importlib.util.module_from_spec(spec)
spec.loader.exec_module(origins)

def test(x):
    if x == "return in with":
        with open("/dev/null"):
            return
    if x == "caught":
        try:
            assert False
        except AssertionError:
            return
    if x == "fails through with":
        with open("/dev/null"):
            assert False
    assert x == "return"

def outcome(x, call=lambda f, x: f(x)):
    stop = origins.watch_returns(test.__code__)
    try:
        call(test, x)
    except AssertionError:
        pass
    return not stop()  # stop() lists the watched codes none of whose frames returned

def in_thread(f, x):
    t = threading.Thread(target=lambda: f(x))
    t.start()
    t.join()

found = {x: outcome(x) for x in ("return", "return in with", "fails", "fails through with")}
found["caught"] = outcome("caught")
found["never called"] = outcome("return", lambda f, x: None)
found["returns in a thread"] = outcome("return", in_thread)
found["profile put back"] = sys.getprofile() is None and threading._profile_hook is None

def layer(x):  # a decorator's layer: calls the test, which returns, then fails itself unless x == "return"
    test("return")
    assert x == "return"

def layered(x):
    stop = origins.watch_returns(test.__code__, layer.__code__)
    try:
        layer(x)
    except AssertionError:
        pass
    return [c.co_name for c in stop()]

found["layer returns"] = layered("return")
found["layer unwinds"] = layered("fails")

class Mimic:  # what code under test could hand the profile function it gets from sys.getprofile()
    f_code = test.__code__
    f_lasti = max(i.offset for i in __import__("dis").get_instructions(test) if i.opname.startswith("RETURN"))

def forged(f, x):
    sys.getprofile()(Mimic(), "return", None)

found["forged return"] = outcome("fails", forged)
found["version"] = list(sys.version_info[:2])
print(json.dumps(found))
"""


def _interpreters() -> list[str]:
    found = [sys.executable]
    for minor in ("3.7", "3.8", "3.9", "3.10", "3.12", "3.13"):
        builds = sorted(PYENV.glob(f"{minor}.*"))
        found += [str(builds[-1] / "bin" / "python3")] if builds else []
    return found


@pytest.mark.parametrize("python", _interpreters(), ids=lambda p: Path(p).parent.parent.name)
def test_a_return_counts_and_an_unwinding_or_a_missed_call_does_not(python, tmp_path):
    script = tmp_path / "watch.py"
    script.write_text(SCRIPT)
    run = subprocess.run(
        [python, str(script), runner_origins.__file__], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    version = tuple(found.pop("version"))
    assert found == {
        "return": True,
        "return in with": True,
        "caught": True,
        "fails": False,
        # 3.7 ends a frame unwinding through a with on END_FINALLY, as a return there (docs/tasks.md)
        "fails through with": version < (3, 8),
        "never called": False,
        "returns in a thread": True,
        "profile put back": True,
        # a layer is watched like the def: the one whose frames only unwound is named
        "layer returns": [],
        "layer unwinds": ["layer"],
        # only the interpreter's own call, from the frame it leaves, counts
        "forged return": False,
    }, (python, found)
