"""Fixtures of the LLM tests (also re-exported for the whole suite by tests/conftest.py)."""

from tests.llm_fixtures import scripted_llm, scripted_llm_settings  # noqa: F401
