"""The exploit audit: rules that read every turn of an episode for attempts to find the answer instead of
writing it (git history, the network, the project's own release, the tests, the grader, start-up hooks).

``register_rule(AuditRule(name, severity, reason, check))`` adds a rule; :func:`audit_turn` runs the rules on
one turn, :func:`audit_episode` on a recorded episode. SWEEpisode runs them per turn (``EpisodeConfig.audit``).
"""

# the built-in rules register themselves on import; importing them here (not from core.rules()) keeps core and
# rules one-way (rules -> core), and still comes before any other code can reach register_rule
import swebox.envs.audit.rules  # noqa: F401
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

__all__ = ["MODES", "SEVERITIES", "AuditContext", "AuditRule", "AuditTurn", "EpisodeAudit", "audit_episode",
           "audit_metrics", "audit_turn", "metric_names", "register_rule", "rules", "summary", "unregister_rule"]
