"""HTML pieces of ``traj view`` built in Python rather than in a template loop: the Tokens view
(tens of thousands of tokens, one ``<span>`` each), value formatting, links, and the colourings
the Tokens view offers for a trajectory."""

from __future__ import annotations

import html
import math
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup

from trajstore.view.trajectory import TrajectoryPage
from trajstore.view.urls import trajectory_path

COLOURINGS: tuple[tuple[str, str, str], ...] = (
    ("lp", "engine log-prob", "the rollout engine's log-prob of the token (nats): red = unlikely, green = likely"),
    ("pv", "policy version", "the policy version that generated the token's action span (one colour per version)"),
    ("st", "staleness", "versions between the run's trainer and the token's policy version: green = fresh, red = stale"),
    ("tlp", "trainer log-prob", "log pi_theta of the token as the run's policy loss saw it (nats)"),
    ("ratio", "importance ratio", "exp(trainer - behaviour log-prob): blue < 1 < red"),
    ("band", "DIS band", "green = inside the band (kept), blue = at or below 1 - eps_low, red = at or above 1 + eps_high "
                         "(both masked out of the gradient)"),
    ("adv", "advantage", "the advantage the loss weighed the token with: red < 0 < green"),
    ("value", "value", "the critic's value at the token: red < 0 < green"),
    ("ret", "return", "the critic's target at the token: red < 0 < green"),
)
"""(key in :attr:`TrajectoryPage.numbers`, label, what the colour means) of every colouring."""


def trajectory_url(trajectory_id: str, **params: Any) -> str:
    """``/t/<trajectory_id>`` (percent-encoded) with optional query parameters."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return trajectory_path(trajectory_id) + (f"?{query}" if query else "")


def fmt(v: Any, digits: int = 4) -> str:
    """A value as the list and the panels show it (``-`` for none)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if math.isfinite(v) else str(v)
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def colourings(page: TrajectoryPage) -> list[dict[str, Any]]:
    """The colourings of a trajectory's Tokens view: key, label, what it shows, and ``missing``
    (why it cannot be used here, e.g. annotations the run did not record) or None."""
    out = []
    for key, label, what in COLOURINGS:
        missing = None
        values = page.numbers.get(key)
        if values is None:
            if key == "st":
                missing = page.staleness_note or "choose a run to measure staleness against"
            elif page.run is None:
                missing = "no training run chosen (the run selector above)"
            else:
                missing = (f"run {page.run} recorded no per-token annotations of this trajectory "
                           "(traj train --record-tokens FRACTION)")
        elif not any(v is not None for v in values):
            missing = f"no {label} for any action token of this trajectory"
        out.append({"key": key, "label": label, "what": what, "missing": missing})
    return out


def tokens_html(page: TrajectoryPage) -> Markup:
    """The Tokens view: one block per span (kind and role as a label), one ``<span class="t">`` per
    token with ``data-i`` (its position) and, for action tokens, class ``a`` and ``data-a`` (its
    index among the action tokens, into the page's numbers)."""
    out: list[str] = []
    pieces, ai = page.pieces, page.action_index
    for sp in page.spans:
        label = html.escape(f"{sp.kind}{' · ' + sp.role if sp.role else ''}")
        out.append(f'<div class="tspan kind-{html.escape(sp.kind)}" id="tspan-{sp.index}">'
                   f'<span class="tlabel">{label}</span>')
        for i in range(sp.start, sp.end):
            text = html.escape(pieces[i]) if i < len(pieces) else ""
            if ai[i] >= 0:
                out.append(f'<span class="t a" data-i="{i}" data-a="{ai[i]}">{text}</span>')
            else:
                out.append(f'<span class="t" data-i="{i}">{text}</span>')
        out.append("</div>")
    return Markup("".join(out))
