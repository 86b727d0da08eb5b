"""A small real Harbor task folder (harbor 0.25's layout), written by the tests that need one.

The environment is the suite's py39 test image (tests/envs/cache/py39_image.py: Debian bullseye, Python 3.9
in /opt/venv/testbed, git) plus Dockerfile lines swebox runs rootless: ENV, WORKDIR /app (not /testbed, so
the move to /testbed is exercised), COPY of a buggy module and a RUN. ``tests/test.sh`` pays 1 when the bug
is fixed, as Terminal-Bench's verifiers do; ``solution/solve.sh`` fixes it.
"""

from __future__ import annotations

from pathlib import Path

GREET = "def greet(name):\n    return 'Hello ' + name.upper()\n"
"""The buggy module: greet('ada') must be 'Hello ada'."""
TASK_TOML = """\
schema_version = "1.1"

[metadata]
difficulty = "easy"
category = "debugging"

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 300.0

[environment]
cpus = 1
memory_mb = 1024
"""
INSTRUCTION = "greet('ada') in /app/greet.py returns 'Hello ADA'; it should return 'Hello ada'. Fix it.\n"
TEST_SH = """\
#!/bin/bash
# Harbor's verifier contract: write the reward to /logs/verifier/reward.{txt,json}
cd /app
if [ "$GREETING_MODE" = plain ] && [ "$(cat build-stamp.txt)" = "built with Python 3.9.2" ] \\
   && python -c "from greet import greet; assert greet('ada') == 'Hello ada', greet('ada')"; then
  REWARD=1
else
  REWARD=0
fi
WRITE_REWARD
"""
SOLVE_SH = "#!/bin/bash\nset -e\ncd /app\nsed -i 's/name.upper()/name/' greet.py\n"


def dockerfile(image: str) -> str:
    return (
        f"FROM {image}\n"
        "# a comment, then a continued RUN line\n"
        "ENV GREETING_MODE=plain\n"
        "WORKDIR /app\n"
        "COPY greet.py ./greet.py\n"
        "RUN /opt/venv/testbed/bin/python -c \\\n"
        "      'import sys; print(\"built with Python\", sys.version.split()[0])' \\\n"
        "      > build-stamp.txt\n"
        "CMD [\"bash\"]\n"
    )


def write_task(root: Path, image: str, *, reward: str = "txt", name: str = "greet-task") -> Path:
    """A Harbor task folder at ``root/name``; ``reward``: 'txt', 'json' or 'broken' (writes a non-number)."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text(INSTRUCTION)
    (task / "environment" / "Dockerfile").write_text(dockerfile(image))
    (task / "environment" / "greet.py").write_text(GREET)
    write = {
        "txt": "echo $REWARD > /logs/verifier/reward.txt",
        "json": 'echo "{\\"reward\\": $REWARD, \\"fixed\\": $REWARD}" > /logs/verifier/reward.json',
        "broken": "echo not-a-number > /logs/verifier/reward.txt",
    }[reward]
    (task / "tests" / "test.sh").write_text(TEST_SH.replace("WRITE_REWARD", write))
    (task / "solution" / "solve.sh").write_text(SOLVE_SH)
    (task / "solution" / "solve.sh").chmod(0o755)
    return task
