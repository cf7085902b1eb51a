"""The scripted LLM fixtures of the LLM work, for the process-level tests here."""

from tests.llm_fixtures import scripted_llm, scripted_llm_settings  # noqa: F401
