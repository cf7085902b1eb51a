"""Service settings: validated at construction, read from the environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jidocode.services.conversation.core import Limits
from jidocode.services.conversation.settings import RuntimeSettings


def test_defaults() -> None:
    s = RuntimeSettings()
    assert s.lease_ttl_s == 10.0 and s.max_message_bytes == 256 * 1024
    assert s.idle_timeout_s == 300.0
    assert s.limits == Limits(max_queue=256, max_drain_steps=64, max_turns=20)


@pytest.mark.parametrize(
    "bad",
    [
        {"lease_ttl_s": 0.1},
        {"max_message_bytes": 10},
        {"max_message_bytes": 8 * 1024 * 1024},  # over the bus's one payload limit (with the envelope)
        {"tool_timeout_s": 0},
        {"list_tools_timeout_s": -1},
        {"idle_timeout_s": 0},
    ],
)
def test_bad_values_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        RuntimeSettings.model_validate(bad)


@pytest.mark.parametrize("bad", [{"max_queue": 0}, {"max_drain_steps": 0}, {"max_turns": 0}])
def test_bad_limits_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        Limits.model_validate(bad)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JIDO_CONV_LEASE_TTL", "2.5")
    monkeypatch.setenv("JIDO_CONV_IDLE_TIMEOUT", "42")
    monkeypatch.setenv("JIDO_CONV_MAX_MESSAGE_BYTES", "4096")
    monkeypatch.setenv("JIDO_CONV_MAX_QUEUE", "8")
    monkeypatch.setenv("JIDO_CONV_MAX_DRAIN_STEPS", "2")
    s = RuntimeSettings.from_env()
    assert (s.lease_ttl_s, s.max_message_bytes, s.idle_timeout_s) == (2.5, 4096, 42.0)
    assert (s.limits.max_queue, s.limits.max_drain_steps) == (8, 2)


def test_takeover_and_load_retry_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = RuntimeSettings()
    assert (defaults.takeover_concurrency, defaults.load_attempts) == (16, 5)
    assert (defaults.load_retry_base_s, defaults.load_retry_max_s) == (1.0, 60.0)
    for name, value in {
        "JIDO_CONV_TAKEOVER_CONCURRENCY": "4",
        "JIDO_CONV_LOAD_RETRY_BASE": "0.5",
        "JIDO_CONV_LOAD_RETRY_MAX": "30",
        "JIDO_CONV_LOAD_ATTEMPTS": "3",
    }.items():
        monkeypatch.setenv(name, value)
    s = RuntimeSettings.from_env()
    assert (s.takeover_concurrency, s.load_retry_base_s, s.load_retry_max_s, s.load_attempts) == (
        4,
        0.5,
        30.0,
        3,
    )
    monkeypatch.setenv("JIDO_CONV_LOAD_ATTEMPTS", "0")
    with pytest.raises(ValidationError, match="load_attempts"):
        RuntimeSettings.from_env()
