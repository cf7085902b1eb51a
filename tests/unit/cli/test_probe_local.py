"""`jidocode probe` accepts only an answer from a replica on this host (or JIDO_INSTANCE)."""

from __future__ import annotations

from jidocode.cli.status import is_local


def _ping(instance: str) -> dict[str, object]:
    return {"name": "jidocode-engine", "metadata": {"instance": instance}}


def test_hostname_match_by_default() -> None:
    assert is_local(_ping("engine/box1-123"), "engine", None, "box1")
    assert not is_local(_ping("engine/box2-123"), "engine", None, "box1")
    assert not is_local(_ping("engine/box10-123"), "engine", None, "box1")  # a prefix is not a match


def test_explicit_instance_must_match_exactly() -> None:
    assert is_local(_ping("engine/engine-0"), "engine", "engine-0", "anything")
    assert not is_local(_ping("engine/engine-1"), "engine", "engine-0", "anything")


def test_another_service_never_counts() -> None:
    assert not is_local(_ping("project/box1-1"), "engine", None, "box1")
    assert not is_local({"name": "x"}, "engine", None, "box1")
