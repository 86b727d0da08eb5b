"""Run in the harbor venv (Python >= 3.12): SweboxEnvironment through Harbor's own factory and task classes.

``python harbor_contract.py TASK_DIR STORE WORK`` creates the environment as ``harbor run`` does
(``EnvironmentFactory.create_environment_from_import_path`` with the task's ``[environment]`` config), then
exercises every method of harbor 0.25's ``BaseEnvironment`` contract that a trial uses and prints one JSON
object of what it saw; the calling test asserts on it.
"""

import asyncio
import json
import sys
from pathlib import Path

from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.task import Task
from harbor.models.trial.paths import TrialPaths


async def main(task_dir: Path, store: str, work: Path) -> dict:
    task = Task(task_dir)
    trial_paths = TrialPaths(work / "trial")
    trial_paths.mkdir()
    env = EnvironmentFactory.create_environment_from_import_path(
        "swebox.envs.frameworks.harbor_env:SweboxEnvironment",
        environment_dir=task.paths.environment_dir,
        environment_name=task.name,
        session_id="contract__env",
        trial_paths=trial_paths,
        task_env_config=task.config.environment,
        store=store,
        cache_root=str(work / "node"),
    )
    seen: dict = {"type": env.type()}
    await env.start(force_build=False)
    try:
        r = await env.exec("pwd; echo $GREETING_MODE; echo to-stderr >&2; cd /; exit 3")
        seen["exec"] = [r.stdout, r.stderr, r.return_code]
        r = await env.exec("pwd; echo $EXTRA", cwd="/tmp", env={"EXTRA": "a b"})
        seen["exec_cwd_env"] = [r.stdout, r.return_code]
        r = await env.exec("pwd")  # the cd of the call before did not leak
        seen["exec_fresh"] = r.stdout
        try:
            await env.exec("sleep 30", timeout_sec=1)
            seen["timeout"] = "no error"
        except RuntimeError as exc:
            seen["timeout"] = str(exc)
        local = work / "up"
        (local / "sub").mkdir(parents=True)
        (local / "a.txt").write_text("A")
        (local / "sub" / "b.sh").write_text("#!/bin/sh\necho B\n")
        (local / "sub" / "b.sh").chmod(0o755)
        await env.upload_file(local / "a.txt", "/data/one/a.txt")
        await env.upload_dir(local, "/data/tree")
        r = await env.exec("cat /data/one/a.txt; /data/tree/sub/b.sh; find /data/tree | sort")
        seen["uploaded"] = r.stdout
        seen["is_dir"] = [await env.is_dir("/data/tree/sub"), await env.is_dir("/data/one/a.txt")]
        seen["is_file"] = [await env.is_file("/data/one/a.txt"), await env.is_file("/nope")]
        await env.exec("mkdir -p /out/x && echo X > /out/x/x.txt && echo T > /out/top.txt")
        await env.download_file("/out/top.txt", work / "down" / "top.txt")
        await env.download_dir("/out", work / "down" / "tree")
        seen["downloaded"] = sorted(str(p.relative_to(work / "down")) for p in (work / "down").rglob("*"))
        seen["downloaded_x"] = (work / "down" / "tree" / "x" / "x.txt").read_text()
        try:
            await env.exec("true", user="nobody")
            seen["user"] = "no error"
        except ValueError as exc:
            seen["user"] = str(exc)
    finally:
        await env.stop(delete=True)
    try:
        await env.exec("true")
        seen["after_stop"] = "no error"
    except RuntimeError as exc:
        seen["after_stop"] = str(exc)
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))))
