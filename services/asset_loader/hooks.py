"""Skill pre/post hooks exactly as seed 001 ``HookEmitter`` specifies them (pure part).

* Only two hook points: ``pre`` (just before route dispatch) and ``post``
  (just after the action finished, with its ``status``).
* The skill's frontmatter ``jido.hooks.<phase>`` replaces the settings
  ``hooks.<phase>``; ``enabled: false`` switches the phase off; when neither
  exists no signal is emitted.
* The hook's ``data`` template is interpolated: a value that is exactly
  ``{{skill_name}}``, ``{{route}}``, ``{{status}}`` or ``{{timestamp}}``
  becomes the runtime value (the placeholders are also replaced inside longer
  strings), then the runtime data (``phase``, ``skill_name``, ``route``,
  ``timestamp``, and ``status`` for post) is merged over it.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.settings import HookSettings, HooksSettings

from .models import Skill

__all__ = ["HookSignal", "hook_signal", "interpolate", "resolve_hook"]

Phase = Literal["pre", "post"]
_PLACEHOLDER: Final = re.compile(r"\{\{\s*(skill_name|route|status|timestamp)\s*\}\}")


class HookSignal(BaseModel):
    """What to publish: a CloudEvent of ``signal_type`` with ``data`` on ``jido.hook.<type>``."""

    model_config = ConfigDict(frozen=True)

    signal_type: str
    bus: str
    source: str
    data: dict[str, Any]


def resolve_hook(phase: Phase, skill: Skill, global_hooks: HooksSettings) -> HookSettings | None:
    """The hook that applies, or ``None`` when the phase is off or not configured."""
    hook = getattr(skill.hooks, phase) or getattr(global_hooks, phase)
    if hook is None or not hook.enabled:
        return None
    return hook  # type: ignore[no-any-return]


def interpolate(template: Any, runtime: dict[str, Any]) -> Any:
    """Replace the four placeholders anywhere in ``template`` (nested values included)."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template.strip())
        if whole:
            return runtime.get(whole.group(1))
        return _PLACEHOLDER.sub(
            lambda m: "" if runtime.get(m.group(1)) is None else str(runtime[m.group(1)]), template
        )
    if isinstance(template, dict):
        return {k: interpolate(v, runtime) for k, v in template.items()}
    if isinstance(template, list):
        return [interpolate(v, runtime) for v in template]
    return template


def hook_signal(
    phase: Phase,
    skill: Skill,
    route: str,
    global_hooks: HooksSettings,
    *,
    timestamp: str,
    status: str | None = None,
) -> HookSignal | None:
    """The signal to emit for ``phase`` of dispatching ``route`` on ``skill``, or ``None``."""
    hook = resolve_hook(phase, skill, global_hooks)
    if hook is None:
        return None
    runtime: dict[str, Any] = {
        "phase": phase,
        "skill_name": skill.name,
        "route": route,
        "timestamp": timestamp,
    }
    if phase == "post":
        runtime["status"] = status
    data = interpolate(hook.data, runtime)
    data.update(runtime)
    return HookSignal(
        signal_type=hook.signal_type, bus=hook.bus, source=f"/hooks/{hook.signal_type}", data=data
    )
