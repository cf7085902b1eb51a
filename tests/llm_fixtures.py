"""Fixtures of the LLM work: the scripted OpenAI-compatible server.

``tests/conftest.py`` does ``from tests.llm_fixtures import *``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jidocode.cli.dev.scripted_llm import ScriptedLlm

__all__ = ["scripted_llm", "scripted_llm_settings"]


@pytest.fixture
async def scripted_llm() -> AsyncIterator[ScriptedLlm]:
    """A scripted LLM on a random loopback port; script it with ``scripted_llm.script(Reply…)``."""
    async with ScriptedLlm() as server:
        yield server


@pytest.fixture
def scripted_llm_settings(scripted_llm: ScriptedLlm) -> dict[str, object]:
    """``llm`` settings pointing litellm at the scripted server, with fast retries."""
    return {
        "model": "openai/scripted",
        "api_base": scripted_llm.api_base,
        "max_retries": 3,
        "retry_backoff_s": 0.01,
        "retry_backoff_max_s": 0.05,
        "timeout_s": 30.0,
    }
