"""The loop's timing and queue limits are checked when built, before any I/O."""

from __future__ import annotations

import pytest

from jidocode.services.prd.loop import LoopSettings
from jidocode.services.prd.store import loop_key
from jidocode.shared.errors import InvalidInput


def test_defaults_and_the_environment() -> None:
    assert LoopSettings() == LoopSettings(heartbeat_s=2.0, lease_s=10.0, queue_size=256)
    env = {"JIDO_PRD_HEARTBEAT_S": "0.5", "JIDO_PRD_LEASE_S": "3", "JIDO_PRD_EVENT_QUEUE": "8"}
    assert LoopSettings.from_env(env) == LoopSettings(heartbeat_s=0.5, lease_s=3.0, queue_size=8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"heartbeat_s": 0}, "heartbeat_s must be > 0"),
        ({"heartbeat_s": 2.0, "lease_s": 4.0}, "more than twice heartbeat_s"),
        ({"queue_size": 0}, "queue_size must be at least 1"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoopSettings(**kwargs)  # type: ignore[arg-type]


def test_a_bad_environment_value_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="lease_s"):
        LoopSettings.from_env({"JIDO_PRD_LEASE_S": "1"})
    with pytest.raises(InvalidInput):
        LoopSettings.from_env({"JIDO_PRD_HEARTBEAT_S": "soon"})


def test_record_keys_are_checked_tokens() -> None:
    assert loop_key("p1", "auth") == "p1.auth"
    with pytest.raises(ValueError):
        loop_key("p1", "a.b")
