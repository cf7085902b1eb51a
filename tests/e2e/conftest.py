"""The whole-system fixtures of ``test_chat`` (every service, the scripted LLM) for the other e2e files."""

from tests.e2e.test_chat import llm_server, system

__all__ = ["llm_server", "system"]
