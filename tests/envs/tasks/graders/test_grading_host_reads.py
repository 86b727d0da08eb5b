"""What grading reads after the tested code ran is read by the host, never by a process of the grading sandbox
(issue 31): the end of pytest's output is read through the sandbox's root by the host, and the test run itself
is a host command (Sandbox.run), not a child of the sandbox's shell. Real grades of the calc fixture task."""

from __future__ import annotations

from swebox.envs.tasks.graders.grading import grade

from tests.envs.tasks.graders.test_grading_tamper import new_file_over_empty

# At import (during the graded run), the code under test puts a FIFO where pytest's output file was and leaves a
# process behind that writes a forged tail to whoever opens it: a `tail` run in the sandbox after the tests
# reads the forger's text; the host's read of the file refuses anything that is not a regular file.
FIFO_TAIL = (
    "import glob, os\n"
    "for _out in glob.glob('/swebox-grade-*/pytest.out'):\n"
    "    try:\n"
    "        os.mkfifo(_out + '.fifo')\n"
    "        os.rename(_out + '.fifo', _out)\n"
    "    except OSError:\n"
    "        continue\n"
    "    if os.fork() == 0:\n"
    "        try:\n"
    "            os.setsid()\n"
    "            _fd = os.open(_out, os.O_WRONLY)\n"
    "            os.write(_fd, b'FORGED TAIL: 7 passed in 0.01s\\n')\n"
    "        finally:\n"
    "            os._exit(0)\n"
)


def test_the_output_tail_is_not_read_through_a_fifo_the_tested_code_left(calc_layer, calc_task):
    report = grade(calc_task, new_file_over_empty("calc/__init__.py", FIFO_TAIL), layers=[calc_layer])
    assert report.verdict == "ok", report.to_dict()  # the verdict came over the monitor's channel, as ever
    assert "FORGED" not in report.output_tail, report.output_tail
    assert not report.resolved and report.reward == 0.0  # the bug is still there


def test_the_output_tail_is_pytests_own_for_an_honest_run(calc_layer, calc_task, gold):
    report = grade(calc_task, gold["add"], layers=[calc_layer])
    assert report.resolved and report.reward == 1.0, report.to_dict()
    assert "passed" in report.output_tail, report.output_tail
