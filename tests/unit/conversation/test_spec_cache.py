"""The tool-list cache: one request per project at a time, however many conversations ask."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.services.conversation.spec_cache import ToolSpecCache
from jidocode.shared.errors import ServiceUnavailable

SPEC = LlmToolSpec(name="read_file", description="reads", parameters={"type": "object"})


class _ProjectService:
    """Answers ``list_tools`` when told to (``release``), counting the requests."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.release = asyncio.Event()
        self.down = False

    async def __call__(self, bus: Any, project_id: str, *, timeout: float) -> list[LlmToolSpec]:
        self.asked.append(project_id)
        await self.release.wait()
        if self.down:
            raise ServiceUnavailable("nobody answers")
        return [SPEC]


def _cache(service: _ProjectService, ttl: float = 60.0) -> ToolSpecCache:
    settings = RuntimeSettings(tool_specs_ttl_s=ttl, list_tools_patience_s=0.0)
    return ToolSpecCache(None, settings, list_tools=service)  # type: ignore[arg-type]


async def test_many_callers_share_one_request_per_project() -> None:
    service = _ProjectService()
    cache = _cache(service)
    callers = [asyncio.create_task(cache.get("p")) for _ in range(200)]
    other = asyncio.create_task(cache.get("q"))
    await asyncio.sleep(0)  # every caller is waiting now
    service.release.set()
    assert all(r == [SPEC] for r in await asyncio.gather(*callers, other))
    assert sorted(service.asked) == ["p", "q"]
    assert await cache.get("p") == [SPEC] and len(service.asked) == 2  # then fresh in the cache


async def test_a_cancelled_caller_does_not_cancel_the_others_request() -> None:
    service = _ProjectService()
    cache = _cache(service)
    first, second = asyncio.create_task(cache.get("p")), asyncio.create_task(cache.get("p"))
    await asyncio.sleep(0)
    first.cancel()
    service.release.set()
    assert await second == [SPEC] and service.asked == ["p"]
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_dropped_list_is_asked_again_and_a_fetch_from_before_is_not_kept() -> None:
    service = _ProjectService()
    cache = _cache(service)
    before = asyncio.create_task(cache.get("p"))
    await asyncio.sleep(0)
    cache.drop("p")  # assets reloaded while the first request ran
    after = asyncio.create_task(cache.get("p"))
    await asyncio.sleep(0)
    service.release.set()
    await asyncio.gather(before, after)
    assert service.asked == ["p", "p"]


async def test_the_last_list_serves_while_the_service_is_down_and_is_not_made_fresh() -> None:
    service = _ProjectService()
    service.release.set()
    cache = _cache(service, ttl=0.0)  # every get asks again
    assert await cache.get("p") == [SPEC]
    service.down = True
    assert await cache.get("p") == [SPEC] and await cache.get("p") == [SPEC]
    assert len(service.asked) == 3  # the fallback was not cached as fresh: asked each time
