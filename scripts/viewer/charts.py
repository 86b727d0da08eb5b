"""Small inline SVG charts for the run page: drawn on the server, so the page needs no script or external asset."""

from __future__ import annotations

from html import escape

W, H, PAD = 560, 180, 34
COLORS = ("#2f6fb0", "#d0672c", "#3c9a5f", "#8d5fb8", "#b83c55", "#7a7a7a")


def _scale(values: list[float], lo: float | None = None, hi: float | None = None) -> tuple[float, float]:
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    return (lo, hi if hi > lo else lo + 1.0)


def _frame(title: str, lo: float, hi: float, steps: list[int]) -> list[str]:
    parts = [
        f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
        f'<text x="{PAD}" y="14" class="chart-title">{escape(title)}</text>',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 8}" y2="{H - PAD}" class="axis"/>',
        f'<line x1="{PAD}" y1="22" x2="{PAD}" y2="{H - PAD}" class="axis"/>',
        f'<text x="4" y="{H - PAD}" class="tick">{lo:.3g}</text>',
        f'<text x="4" y="30" class="tick">{hi:.3g}</text>',
    ]
    if steps:
        parts.append(f'<text x="{PAD}" y="{H - PAD + 14}" class="tick">step {steps[0]}</text>')
        parts.append(f'<text x="{W - 60}" y="{H - PAD + 14}" class="tick">step {steps[-1]}</text>')
    return parts


def _x(i: int, n: int) -> float:
    return PAD + 6 + (W - PAD - 20) * (i / max(1, n - 1))


def _y(v: float, lo: float, hi: float) -> float:
    return H - PAD - (H - PAD - 24) * ((v - lo) / (hi - lo))


def line_chart(
    title: str,
    steps: list[int],
    series: dict[str, list[float | None]],
    lo: float | None = None,
    hi: float | None = None,
) -> str:
    """Lines over steps; None values are gaps."""
    values = [v for vs in series.values() for v in vs if v is not None]
    if not steps or not values:
        return f'<p class="empty">{escape(title)}: no steps logged yet.</p>'
    lo, hi = _scale(values, lo, hi)
    parts = _frame(title, lo, hi, steps)
    for k, (name, vs) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        points = [(_x(i, len(steps)), _y(v, lo, hi)) for i, v in enumerate(vs) if v is not None]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>' for x, y in points]
        parts.append(f'<text x="{W - 150}" y="{14 + 12 * k}" class="legend" fill="{color}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(title: str, steps: list[int], parts_by_name: dict[str, list[float]]) -> str:
    """One stacked bar per step (e.g. the time breakdown of each step)."""
    if not steps:
        return f'<p class="empty">{escape(title)}: no steps logged yet.</p>'
    totals = [sum(vs[i] for vs in parts_by_name.values()) for i in range(len(steps))]
    lo, hi = 0.0, max(max(totals), 1e-9)
    parts = _frame(title, lo, hi, steps)
    width = max(2.0, (W - PAD - 20) / max(1, len(steps)) * 0.7)
    for i in range(len(steps)):
        x = PAD + 6 + (W - PAD - 20) * (i / max(1, len(steps))) if len(steps) > 1 else PAD + 10
        base = 0.0
        for k, vs in enumerate(parts_by_name.values()):
            top = base + vs[i]
            y0, y1 = _y(base, lo, hi), _y(top, lo, hi)
            parts.append(
                f'<rect x="{x:.1f}" y="{y1:.1f}" width="{width:.1f}" height="{max(0.0, y0 - y1):.1f}" '
                f'fill="{COLORS[k % len(COLORS)]}"/>'
            )
            base = top
    for k, name in enumerate(parts_by_name):
        parts.append(
            f'<text x="{W - 150}" y="{14 + 12 * k}" class="legend" fill="{COLORS[k % len(COLORS)]}">'
            f'{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
