"""swebox.envs.sandbox: the isolation mechanism (namespaces, layers, overlay, the shell, limits).

Knows nothing of RL or tasks; imports nothing else of swebox. See docs/sandbox.md for the threat model.
"""

from .closer import wait_for_closes
from .layers import Layer
from .policy import SandboxError, SandboxPolicy
from .sandbox import Sandbox
from .shell_session import ExecResult
from .usage import Usage

__all__ = ["ExecResult", "Layer", "Sandbox", "SandboxError", "SandboxPolicy", "Usage", "wait_for_closes"]
