"""A search's tree for the rollout page: the ``search`` part of a ``swebox eval --search/--best-of/--samples
--out`` record (envs/search/nodes.py) as nested items, the chosen path marked, the rule labelled."""

from __future__ import annotations

from typing import Any

ORACLE_LABEL = "the ORACLE (hidden tests; research only)"
"""How every report names the oracle rule (as trainers/evaluation/eval_search.py's report does)."""


def action_summary(turn: dict[str, Any], limit: int = 160) -> str:
    """The turn's action on one line: the tool and its first argument's first line."""
    action = turn.get("action")
    if not isinstance(action, dict):
        return "format error: no action"
    arguments = action.get("arguments") or {}
    first = str(next(iter(arguments.values()), "")) if isinstance(arguments, dict) else ""
    line = first.strip().splitlines()[0] if first.strip() else ""
    text = f"{action.get('tool', '?')}: {line}" if line else str(action.get("tool", "?"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def search_tree(record: dict[str, Any]) -> dict[str, Any] | None:
    """{"roots": nested items, "rule": its label, "oracle", "picked_line", costs}; None for a plain episode.

    An item is {"node", "attempt" (its graded attempt or None), "chosen" (on the picked line's path),
    "picked", "children"} with the children in the order they were forked.
    """
    search = record.get("search")
    if not isinstance(search, dict) or not isinstance(search.get("tree"), list) or not search["tree"]:
        return None
    nodes = [n for n in search["tree"] if isinstance(n, dict) and isinstance(n.get("index"), int)]
    attempts = search.get("attempts") or []
    picked = search.get("picked", -1)
    picked_line = attempts[picked].get("index") if isinstance(picked, int) and 0 <= picked < len(attempts) else None
    chosen = set(search.get("chosen") or [])
    children: dict[Any, list[dict[str, Any]]] = {}
    for node in nodes:
        children.setdefault(node.get("parent"), []).append(node)

    def item(node: dict[str, Any], seen: frozenset[int]) -> dict[str, Any]:
        at = node.get("attempt", -1)
        kids = sorted(children.get(node["index"], []), key=lambda c: (c.get("forked_at", 0), c["index"]))
        return {
            "node": node,
            "attempt": attempts[at] if isinstance(at, int) and 0 <= at < len(attempts) else None,
            "chosen": node["index"] in chosen,
            "picked": node["index"] == picked_line,
            "children": [item(k, seen | {k["index"]}) for k in kids if k["index"] not in seen],
        }

    known = {n["index"] for n in nodes}
    roots = [n for n in nodes if n.get("parent") not in known]  # a damaged parent link still shows its line
    oracle = bool(search.get("oracle"))
    return {
        "roots": [item(n, frozenset({n["index"]})) for n in roots],
        "oracle": oracle,
        "rule": ORACLE_LABEL if oracle else str(search.get("rule", "")),
        "picked_line": picked_line,
        "lines": len(nodes),
        "pruned": sum(n.get("status") == "pruned" for n in nodes),
        "resolved": search.get("resolved_count", 0),
        "attempts": len(attempts),
        "sandboxes": search.get("sandboxes", 0),
        "forks": search.get("forks", 0),
        "budgets_hit": search.get("budgets_hit") or [],
    }
