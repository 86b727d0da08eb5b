"""The exploit audit: rules that read every turn of an episode for attempts to find the answer instead of
writing it (git history, the network, the project's own release, the tests, the grader, start-up hooks).

``register_rule(AuditRule(name, severity, reason, check))`` adds a rule; :func:`audit_turn` runs the rules on
one turn, :func:`audit_episode` on a recorded episode. SWEEpisode runs them per turn (``EpisodeConfig.audit``).
"""

# the built-in rules register themselves on import; first, so that the name ``rules`` below is core's function
# (importing a submodule binds its name on the package) and core never has to import its own rules (a loop)
from swebox.envs.audit import rules as _builtin_rules  # noqa: F401  isort: skip
from swebox.envs.audit.core import (
    MODES,
    SEVERITIES,
    AuditContext,
    AuditRule,
    AuditTurn,
    EpisodeAudit,
    audit_episode,
    audit_metrics,
    audit_turn,
    metric_names,
    register_rule,
    rules,
    summary,
    unregister_rule,
)

__all__ = [
    "MODES",
    "SEVERITIES",
    "AuditContext",
    "AuditRule",
    "AuditTurn",
    "EpisodeAudit",
    "audit_episode",
    "audit_metrics",
    "audit_turn",
    "metric_names",
    "register_rule",
    "rules",
    "summary",
    "unregister_rule",
]
