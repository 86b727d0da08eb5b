"""Issue 31's diff classes, graded for real over calc: the graded tree must be the agent's tree.

Class 5: the filter split a diff's lines with ``str.splitlines``, which also breaks on ``\\f``, ``\\v``,
``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``, ``\\u2029`` (and a lone ``\\r``); git breaks on ``\\n`` only. A ``+``
line holding a form feed ended the filter's hunk early, the rest of the hunk was dropped, and the next file's
``diff --git`` line was glued onto the cut line: the grader applied a tree the agent never had. The attack
below fixes ``add`` before the form feed and redefines it, still buggy, after it: the agent's tree (git's
reading of its diff) keeps the bug, and the old grader paid 1.0 for it.
"""

from __future__ import annotations

import pytest
from swebox.envs.tasks.graders.grading import grade

F2P = "tests/test_ops.py::test_add"
# calc/ops.py ends with div (lines 13-14): the hunk appends a fixed add, a comment holding the separator, then
# the buggy add again. Its header counts are those of the hunk cut at the separator (old 2, new 7), which git
# falls back to when README's `index` line (glued after the cut) stops its recount.
SMUGGLE = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
    "@@ -13,2 +13,7 @@ def mul(a, b):\n def div(a, b):\n     return a // b\n+\n+\n+def add(a, b):\n"
    "+    return a + b\n+# note{sep}x\n+\n+\n+def add(a, b):\n+    return a - b\n"
    "diff --git a/README.md b/README.md\nindex 1111111..2222222 100644\n--- a/README.md\n+++ b/README.md\n"
    "@@ -1 +1 @@\n-calc\n+calc!\n"
)


@pytest.mark.parametrize("sep", ["\f", "\u2028"], ids=["form-feed", "line-separator"])
def test_a_line_separator_inside_a_line_cannot_cut_a_hunk(calc_layer, graded_task, sep):
    report = grade(graded_task, SMUGGLE.format(sep=sep), layers=[calc_layer])
    # git applies the whole hunk: add is redefined buggy after the comment, so the bug is what gets graded
    assert report.applied and report.dropped == [], report.to_dict()
    assert report.tests[F2P].status == "failed", report.to_dict()
    assert not report.resolved and report.reward == 0.0


def test_the_same_fix_without_the_buggy_tail_resolves(calc_layer, graded_task):
    # the other side: the separator itself is harmless, only the tree decides
    fixed = SMUGGLE.format(sep="\f").replace("+\n+\n+def add(a, b):\n+    return a - b\n", "")
    report = grade(graded_task, fixed, layers=[calc_layer])
    assert report.applied and report.tests[F2P].status == "passed", report.to_dict()
    assert report.resolved and report.reward == 1.0
