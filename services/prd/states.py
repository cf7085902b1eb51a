"""Loop states and their transitions (pure; seed 004 "State models").

The seed's table, plus two edges (docs/decisions/0272-paused-loop-can-stop-or-fail.md)::

    ready   -> running
    running -> paused | stopped | error | completed
    paused  -> running | stopped | error

``stopped``, ``error`` and ``completed`` are final for that loop; a new ``run`` starts a new loop
in ``ready`` (:data:`TERMINAL`).
"""

from __future__ import annotations

from typing import Final

from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import LoopState

__all__ = ["TERMINAL", "TRANSITIONS", "can_transition", "transition"]

TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    "ready": frozenset({"running"}),
    "running": frozenset({"paused", "stopped", "error", "completed"}),
    # stopped: the user stops a paused loop without resuming it first;
    # error: a paused loop whose state cannot be persisted or restored fails where it is
    "paused": frozenset({"running", "stopped", "error"}),
    "stopped": frozenset(),
    "error": frozenset(),
    "completed": frozenset(),
}
#: States a new ``run`` may start from (a new loop: ``ready`` again).
TERMINAL: Final[frozenset[str]] = frozenset({"stopped", "error", "completed"})


def can_transition(current: LoopState, target: LoopState) -> bool:
    """Whether the table allows ``current -> target`` (unknown states: no)."""
    return target in TRANSITIONS.get(current, frozenset())


def transition(current: LoopState, target: LoopState) -> LoopState:
    """``target`` when allowed, else ``Conflict`` naming both states and what is allowed."""
    if can_transition(current, target):
        return target
    allowed = sorted(TRANSITIONS.get(current, frozenset()))
    what = ", ".join(allowed) if allowed else f"nothing ({current} is final; a new run starts at ready)"
    raise Conflict(
        f"the loop cannot go from {current} to {target}; from {current} it can go to {what}",
        details={"from": current, "to": target, "allowed": allowed},
    )
