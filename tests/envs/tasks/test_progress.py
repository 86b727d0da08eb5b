"""Progress bars: shown with an ETA on a terminal, absent from pipes and logs; lines printed through
``progress.above`` land whole above a running bar."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

CODE = (
    "from swebox.envs.tasks import progress\n"
    "b = progress.bar(2, 'validate', 'task')\n"
    "b.update()\n"
    "with progress.above():\n"
    "    print('row one', flush=True)\n"
    "b.update()\n"
    "b.close()\n"
)


def test_a_bar_on_a_terminal_and_none_in_a_pipe():
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a 120-column terminal
    try:
        proc = subprocess.Popen([sys.executable, "-c", CODE], stdout=secondary, stderr=secondary)
        os.close(secondary)
        secondary = -1
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(primary)
        if secondary != -1:
            os.close(secondary)
    text = seen.decode(errors="replace")
    assert "validate" in text and "2/2" in text and ("task/s" in text or "s/task" in text), text
    assert "row one\r\n" in text or "row one\n" in text

    piped = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stdout == "row one\n" and piped.stderr == ""
