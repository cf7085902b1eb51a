"""Model settings of one call: ``settings.json`` ``llm`` section, environment, per-conversation overrides.

Pure: :func:`resolve_options` reads a mapping (``LlmRequest.settings``) and an
environment mapping and returns validated :class:`LlmOptions`, or raises a
``JidoError`` of type ``llm_not_configured`` (no model) or ``llm_auth`` (no key). Precedence, lowest first:
the model picked from the provider keys (:mod:`jidocode.shared.llm_choice`, only
while neither a model nor an ``api_base`` is configured), defaults, the environment
(``JIDO_LLM_MODEL``, ``JIDO_LLM_API_BASE``), then the request's settings (the
project's ``settings.json`` with the environment already applied by the settings
loader, plus any per-conversation override).

Where the key goes is decided before this module: the settings loader keeps
``model``/``api_base``/``api_key_env`` of an untrusted project out, and drops
an ``api_key_env`` whose ``api_base`` came from another layer; the
conversation service replaces the pair as a whole when a request sets either
(``project_llm_settings``). :func:`resolve_api_key` then sends the named key
only with the ``api_base`` it came with, and with a custom ``api_base`` but no
``api_key_env`` it sends a placeholder, never litellm's provider variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jidocode.shared.errors import JidoError
from jidocode.shared.llm_choice import ModelChoice, how_to_choose
from jidocode.shared.plugins import covers

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "GLOBAL_SETTINGS_FILE",
    "LlmOptions",
    "ToolExposure",
    "resolve_api_key",
    "resolve_options",
]

#: Used when litellm does not know the model's context window.
DEFAULT_CONTEXT_WINDOW = 128_000

#: Key used when a custom ``api_base`` is set but no key is: local
#: OpenAI-compatible servers (ollama, vLLM, the scripted server) ignore it,
#: a real provider answers 401, which becomes ``llm_auth``.
NO_KEY = "sk-no-key-configured"


class ToolExposure(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    expose: list[str] = Field(default_factory=list)
    unexpose: list[str] = Field(default_factory=list)

    def shown(self, name: str) -> bool:
        """Entries are tool names or plugin names (``builtin``, ``assets``, ``mcp__<server>``)."""
        return (not self.expose or any(covers(e, name) for e in self.expose)) and not any(
            covers(u, name) for u in self.unexpose
        )


class LlmOptions(BaseModel):
    """Everything one completion needs; field names follow ``LlmSettings``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_turns: int = Field(default=20, ge=1, le=1000)
    timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    max_retries: int = Field(default=3, ge=0, le=20)
    #: First backoff delay; doubles on each retry up to ``retry_backoff_max_s``.
    retry_backoff_s: float = Field(default=1.0, ge=0.0, le=60.0)
    retry_backoff_max_s: float = Field(default=30.0, ge=0.0, le=600.0)
    max_tokens: int | None = Field(default=None, ge=1)
    #: Overrides litellm's idea of the model's context window.
    context_window: int | None = Field(default=None, ge=1)
    budget_tokens: int | None = Field(default=None, ge=1)
    budget_usd: float | None = Field(default=None, gt=0.0)
    #: The client's ``configure_tools``: ``{"expose": [...], "unexpose": [...]}``. A non-empty
    #: ``expose`` keeps only those tools; ``unexpose`` then removes names. (The policy still
    #: decides what may run; this decides what the model is shown.)
    tools: ToolExposure = Field(default_factory=lambda: ToolExposure())


#: How the global settings file is named in messages when the caller does not say where it is.
GLOBAL_SETTINGS_FILE = "~/.jido_code/settings.json"


def resolve_options(
    settings: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    picked: ModelChoice | None = None,
    settings_file: str = GLOBAL_SETTINGS_FILE,
) -> LlmOptions:
    """Merge and validate; a missing model is ``llm_not_configured``, a bad value ``llm_invalid_settings``.

    ``picked`` (what :func:`~jidocode.shared.llm_choice.choose_model` chose from the
    environment) fills in the model, its key variable and endpoint only when neither a
    model nor an ``api_base`` is configured: a pick never pairs with an endpoint it did
    not come with. ``settings_file`` is named in the ``llm_not_configured`` message.
    """
    merged: dict[str, Any] = {}
    if env.get("JIDO_LLM_MODEL"):
        merged["model"] = env["JIDO_LLM_MODEL"]
    if env.get("JIDO_LLM_API_BASE"):
        merged["api_base"] = env["JIDO_LLM_API_BASE"]
    merged.update({k: v for k, v in settings.items() if v is not None})
    if not merged.get("model") and not merged.get("api_base") and picked is not None:
        merged.update(picked.settings())
    if not merged.get("model"):
        raise JidoError(
            f"no LLM model is configured and none could be picked: {how_to_choose(settings_file)}",
            error_type="llm_not_configured",
            details={"setting": "llm.model", "settings_file": settings_file},
        )
    try:
        return LlmOptions.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise JidoError(f"invalid llm settings: {problems}", error_type="llm_invalid_settings") from None


def resolve_api_key(options: LlmOptions, env: Mapping[str, str]) -> str | None:
    """The key to send, or ``None`` to let litellm use the provider's usual variable.

    A named ``api_key_env`` that is unset is ``llm_auth`` (never retried; said
    plainly, naming the variable, never its value): no call is made without it.
    """
    if options.api_key_env:
        value = env.get(options.api_key_env)
        if not value:
            raise JidoError(
                f"the environment variable {options.api_key_env} (llm.api_key_env) holding the API key "
                "is not set in the conversation service's environment (set it where `jidocode up` runs)",
                error_type="llm_auth",
                retryable=False,
                details={"api_key_env": options.api_key_env},
            )
        return value
    if options.api_base:
        return NO_KEY
    return None
