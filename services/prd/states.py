"""Loop states and their transitions (pure; seed 004 "State models").

STUB (interface fixed; the ``prd-core`` branch implements it).
"""

from __future__ import annotations

from jidocode.shared.events.prd import LoopState

__all__ = ["TERMINAL", "TRANSITIONS", "can_transition", "transition"]

TRANSITIONS: dict[str, frozenset[str]] = {}
#: States a new ``run`` may start from (a new loop: ``ready`` again).
TERMINAL: frozenset[str] = frozenset({"stopped", "error", "completed"})


def can_transition(current: LoopState, target: LoopState) -> bool:
    raise NotImplementedError


def transition(current: LoopState, target: LoopState) -> LoopState:
    """``target`` when allowed, else ``Conflict`` naming both states and what is allowed."""
    raise NotImplementedError
