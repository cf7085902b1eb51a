"""A warm spare (``jidocode up``'s instant restart, decision 0341) waits for ``go`` before it serves."""

from __future__ import annotations

import io
import os
import sys

import pytest

from jidocode.shared.runner import SPARE_ENV, wait_to_serve


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_a_spare_warms_up_then_serves_when_told_go(monkeypatch: pytest.MonkeyPatch) -> None:
    warmed: list[str] = []
    monkeypatch.setenv(SPARE_ENV, "1")
    _stdin(monkeypatch, b"go\n")
    assert wait_to_serve(lambda: warmed.append("litellm")) is True
    assert warmed == ["litellm"]
    assert SPARE_ENV not in os.environ  # the service's own children never see it


def test_a_spare_whose_supervisor_went_away_does_not_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARE_ENV, "1")
    _stdin(monkeypatch, b"")  # stdin ends: up is gone
    assert wait_to_serve() is False


def test_a_service_that_is_no_spare_serves_at_once_without_reading_stdin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SPARE_ENV, raising=False)
    _stdin(monkeypatch, b"not read")
    warmed: list[str] = []
    assert wait_to_serve(lambda: warmed.append("x")) is True
    assert warmed == [] and sys.stdin.read() == "not read"
