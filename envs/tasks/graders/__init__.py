"""Every grading file: the pytest grader (grading.py, verdict.py, grade_monitor.py, pytest_runner.py,
runner_origins.py, rewrite_*.py, junit.py), the log grader (log_grading.py, log_monitor.py,
log_parsers.py, log_canaries.py, swebench_harness.py), the loop both monitors share (monitor_loop.py), diffs,
slots, provenance and re-grading.
"""
