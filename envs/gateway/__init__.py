"""swebox.envs.gateway: the model gateway of harness episodes (an agent program running in the sandbox whose
model calls go to the policy through a recorded, OpenAI-compatible endpoint only that sandbox can reach)."""

from swebox.envs.gateway.calls import CallRecord, ChatModel, Completion, GatewayLimits, OverLimit
from swebox.envs.gateway.server import Gateway

__all__ = ["CallRecord", "ChatModel", "Completion", "Gateway", "GatewayLimits", "OverLimit"]
