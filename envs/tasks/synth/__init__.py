"""swebox.envs.tasks.synth: tasks made from real projects by planting bugs (``swebox tasks synth``, SWE-smith's way).

pipeline.py runs the steps (docs/tasks.md, "Steps"): recipe.py reads a corpus recipe and finds a project's tests,
env.py builds its env layer, mutations.py (with sites.py, libcst) lists candidate bugs, reach.py keeps those the
tests can reach, runner.py runs the tests in a sandbox, statement.py writes the problem statement; cli.py is the
command. Importing this package imports none of them (libcst is the optional ``synth`` extra).
"""
