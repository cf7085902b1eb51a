"""Fixtures of the asset-loader bus tests: the engine, asset loader and tool runner in-process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jidocode.shared.config import Config


@pytest.fixture
async def running(config: Config) -> AsyncIterator[Config]:
    from jidocode.services.registry import serve_many
    from tests.helpers import wait_for_services

    names = ("engine", "asset_loader", "tool_runner")
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, names))
    try:
        await wait_for_services(config, names, timeout=30)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
