"""Every subject a service's code builds with ``jidocode.shared.subjects`` lies inside what its NATS user may
publish or subscribe to. A static guard over the sources (the compose-shaped run proves the paths it drives).

Builder arguments that are not literals are replaced by a sample id (``X1``) or a sample event type
(``x.y``), so a call such as ``subjects.conversation_out(p, c, entry.type)`` checks the general case.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects

from .natsutil import may_publish, may_subscribe

ROOT = Path(__file__).resolve().parents[2]
_BUILDERS = (
    "engine|project|conversations|tools|assets|conversation_in|conversation_out|journal|signal|hook|srv|"
    "project_pattern|conversations_pattern|tools_pattern|assets_pattern|conversation_in_filter|"
    "conversation_out_filter|journal_filter|signal_filter|hook_filter"
)
_CALL = re.compile(rf"subjects\.({_BUILDERS})\(([^()]*)\)")
_LITERAL = re.compile(r"""(?:\w+=)?\s*(['"])([^'"]*)\1""")


def _evaluate(builder: str, args: str) -> str | None:
    values = []
    for raw in (a.strip() for a in args.split(",") if a.strip()):
        literal = _LITERAL.fullmatch(raw)
        values.append(literal.group(2) if literal else None)
    fn = getattr(subjects, builder)
    for filler in ("X1", "x.y"):
        try:
            return str(fn(*[filler if v is None else v for v in values]))
        except ValueError:
            continue
    return None


def _calls(service: str) -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((ROOT / "services" / service).rglob("*.py")):
        for match in _CALL.finditer(path.read_text()):
            subject = _evaluate(match.group(1), match.group(2))
            if subject is not None:
                out.append((str(path.relative_to(ROOT)), match.group(0), subject))
    return out


@pytest.mark.parametrize("service", perms.SERVICES)
def test_every_subject_a_service_builds_is_within_its_permissions(service: str) -> None:
    calls = _calls(service)
    if not calls:
        pytest.skip(f"services/{service} builds no subject yet")
    outside = [
        f"{path}: {call} -> {subject}"
        for path, call, subject in calls
        if not (may_publish(service, subject) or may_subscribe(service, subject))
    ]
    assert not outside, "\n".join(outside)


def test_the_guard_sees_a_violation() -> None:
    subject = _evaluate("conversation_in", '"p1", "c1"')
    assert subject == subjects.conversation_in("p1", "c1")
    assert subject is not None
    assert not (may_publish("asset_loader", subject) or may_subscribe("asset_loader", subject))
    assert _evaluate("conversation_out", "p, c, entry.type") == subjects.conversation_out("X1", "X1", "X1")
