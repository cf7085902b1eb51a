"""Pin the public surface of the shared library (add deliberately, remove never silently)."""

from __future__ import annotations

import importlib

import pytest

MODULES = ["bus", "config", "envelope", "errors", "events", "service", "subjects"]


@pytest.mark.parametrize("name", MODULES)
def test_all_exists_without_duplicates(name: str) -> None:
    module = importlib.import_module(f"jidocode.shared.{name}")
    exported = module.__all__
    assert len(set(exported)) == len(exported)  # order is ruff's job (RUF022)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol}"


def test_bus_surface() -> None:
    from jidocode.shared import bus

    assert set(bus.__all__) == {"Bus", "EnvelopeHandler", "connect_nats", "error_payload", "gather"}
