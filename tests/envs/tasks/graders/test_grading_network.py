"""A task's network (``Task.network``): the grading sandbox gets the network its tests need, and a gold patch
that fails for lack of one is named so by ``swebox tasks validate``'s check.

The calc task with one more test, which reads the number it adds from an HTTP server on the host's loopback
(reached at 10.0.2.2 through slirp4netns, as a row of requests reaches httpbin.org): real grades in real
sandboxes, the gold patch and the empty diff each way."""

from __future__ import annotations

import dataclasses
import http.server
import threading

import pytest
from swebox.envs.sandbox import SandboxPolicy
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.provenance import policy_digest
from swebox.envs.tasks.schema import Task, TaskError
from swebox.envs.tasks.validate import needs_network

from tests.calc import calc_log_task

NET_ID = "tests/test_net.py::test_add_what_the_server_says"


class _Three(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"3")

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Three)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_port
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


@pytest.fixture(params=["junit", "log"])
def graded_calc(request, calc_task) -> Task:
    """calc graded by the JUnit runner, or by its log (and the log's verdict confirmed by the runner)."""
    return calc_task if request.param == "junit" else calc_log_task(calc_task)


def _net_task(calc: Task, port: int, network: str) -> Task:
    lines = [
        "import urllib.request",
        "",
        "from calc.ops import add",
        "",
        "",
        "def test_add_what_the_server_says():",
        f"    three = int(urllib.request.urlopen('http://10.0.2.2:{port}/', timeout=10).read())",
        "    assert add(2, three) == 5",
    ]
    patch = (
        "diff --git a/tests/test_net.py b/tests/test_net.py\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/tests/test_net.py\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)
    )
    log = calc.grader == "log"
    return dataclasses.replace(
        calc,
        test_patch=(calc.test_patch if log else "") + patch,
        # tracebacks in the log, as SWE-bench's `pytest -rA` for requests prints them (its summary cuts messages)
        test_cmd=calc.test_cmd.replace("--tb=no", "--tb=short") + " tests/test_net.py" if log else calc.test_cmd,
        FAIL_TO_PASS=[NET_ID],
        network=network,
    )


# the host's loopback is reachable only where the policy allows it (a test's server stands for the internet)
HOST_LOOPBACK = SandboxPolicy(network_host_loopback=True)


def with_network(network: str) -> SandboxPolicy:
    return dataclasses.replace(HOST_LOOPBACK, network=network)


def test_with_network_the_gold_patch_resolves_and_the_empty_diff_does_not(calc_layer, graded_calc, gold, server):
    task = _net_task(graded_calc, server, "user")
    report = grade(task, gold["add"], layers=[calc_layer], policy=HOST_LOOPBACK)
    assert report.resolved and report.reward == 1.0, report.to_dict()
    assert report.confirm == ("confirmed" if task.grader == "log" else ""), report.to_dict()  # the rerun had it too
    assert report.provenance["sandbox_policy_sha256"] == policy_digest(with_network("user")), report.provenance
    empty = grade(task, "", layers=[calc_layer], policy=HOST_LOOPBACK)
    assert empty.tests[NET_ID].status == "failed" and empty.reward == 0.0, empty.to_dict()  # reached, and wrong
    assert needs_network(task, empty) == "", empty.to_dict()


def test_without_network_the_gold_patch_fails_and_is_named_needs_network(calc_layer, graded_calc, gold, server):
    task = _net_task(graded_calc, server, "none")  # the default: loopback only, whatever the caller's policy allows
    report = grade(task, gold["add"], layers=[calc_layer], policy=HOST_LOOPBACK)
    assert report.tests[NET_ID].status == "failed" and report.reward == 0.0, report.to_dict()
    assert report.provenance["sandbox_policy_sha256"] == policy_digest(with_network("none")), report.provenance
    assert needs_network(task, report).startswith("needs network: its tests failed on 'Network is unreachable'")
    assert "network='user'" in needs_network(task, report)


def test_a_network_the_sandbox_does_not_know_is_refused(calc_task):
    with pytest.raises(TaskError, match=r"Task.network: expected one of \('none', 'user'\); found 'host'"):
        dataclasses.replace(calc_task, network="host")
