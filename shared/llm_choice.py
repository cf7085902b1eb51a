"""Which model to use when none is configured: picked from the provider keys in the environment.

Pure (no I/O, no litellm): the conversation service, ``jidocode models`` and
``jidocode doctor`` all decide with :func:`choose_model` over the same table,
so what the CLI says is what the service does. Whether a local Ollama answers
is a fact the caller brings (:mod:`jidocode.shared.llm_probe` asks it).

The order a model is picked in (the first provider that is usable wins):

==========  ===========================================  ========================================
provider    usable when                                  model picked
==========  ===========================================  ========================================
anthropic   ``ANTHROPIC_API_KEY`` is set                 ``anthropic/claude-sonnet-4-6``
openai      ``OPENAI_API_KEY`` is set                    ``openai/gpt-5.4``
gemini      ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``     ``gemini/gemini-2.5-pro``
openrouter  ``OPENROUTER_API_KEY`` is set                ``openrouter/anthropic/claude-sonnet-4.6``
ollama      a local Ollama answers (``OLLAMA_HOST``,     ``ollama_chat/<its first chat model>``
            ``OLLAMA_API_BASE``, else 127.0.0.1:11434)
==========  ===========================================  ========================================

A configured model (``llm.model`` in a settings file, ``JIDO_LLM_MODEL``, a
conversation's own ``model``) always wins over a pick, and so does a
configured ``api_base``: a pick never sends a key to an endpoint it did not
come with. The picked key travels by name (``api_key_env``), never by value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_OLLAMA_URL",
    "MODEL_ENV",
    "PROVIDERS",
    "SETTINGS_KEY",
    "ModelChoice",
    "Provider",
    "ProviderStatus",
    "choose_model",
    "how_to_choose",
    "ollama_chat_model",
    "ollama_url",
    "provider_key",
    "provider_statuses",
]

#: The environment variable that configures the model (the user's layer of the settings).
MODEL_ENV = "JIDO_LLM_MODEL"
#: The settings key that configures the model.
SETTINGS_KEY = "llm.model"
#: Where Ollama listens unless ``OLLAMA_HOST``/``OLLAMA_API_BASE`` say otherwise.
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
_OLLAMA_PORT = 11434


@dataclass(frozen=True)
class Provider:
    """A provider a model can be picked from: its key variables (first set one wins) and default model."""

    name: str
    key_envs: tuple[str, ...]
    model: str


#: The fixed preference order (see the module docstring). Ollama has no key: it is last.
PROVIDERS: tuple[Provider, ...] = (
    Provider("anthropic", ("ANTHROPIC_API_KEY",), "anthropic/claude-sonnet-4-6"),
    Provider("openai", ("OPENAI_API_KEY",), "openai/gpt-5.4"),
    Provider("gemini", ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "gemini/gemini-2.5-pro"),
    Provider("openrouter", ("OPENROUTER_API_KEY",), "openrouter/anthropic/claude-sonnet-4.6"),
)

#: The key variable litellm reads for well-known providers (a model string's prefix).
_PROVIDER_KEYS: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "groq": "GROQ_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "xai": "XAI_API_KEY",
    "cohere": "COHERE_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
}


@dataclass(frozen=True)
class ModelChoice:
    """A picked model: the ``llm`` settings it stands for and why it was picked."""

    provider: str
    model: str
    #: The variable holding the key (``None`` for Ollama, which takes none).
    api_key_env: str | None
    #: Set for Ollama only (a provider's own endpoint is litellm's default).
    api_base: str | None
    #: One line for logs and ``jidocode models``, e.g. "ANTHROPIC_API_KEY is set".
    reason: str

    def settings(self) -> dict[str, str]:
        """The ``llm`` settings this choice fills in (never a key's value)."""
        out = {"model": self.model}
        if self.api_key_env:
            out["api_key_env"] = self.api_key_env
        if self.api_base:
            out["api_base"] = self.api_base
        return out


@dataclass(frozen=True)
class ProviderStatus:
    """One row of ``jidocode models``: a provider, whether it is usable, and what it would use."""

    provider: str
    usable: bool
    #: The key variables (or the Ollama URL) and their state, e.g. "GEMINI_API_KEY not set, GOOGLE_API_KEY set".
    source: str
    #: The model picked from it (Ollama: ``None`` when it does not answer or lists no chat model).
    model: str | None


def _set_key(provider: Provider, env: Mapping[str, str]) -> str | None:
    return next((name for name in provider.key_envs if env.get(name, "").strip()), None)


def ollama_url(env: Mapping[str, str]) -> str:
    """Ollama's base URL: ``OLLAMA_API_BASE`` (litellm's), else ``OLLAMA_HOST`` (Ollama's), else the default.

    ``OLLAMA_HOST`` may be ``host``, ``host:port`` or a URL; a bind-all host
    (``0.0.0.0``, ``::``) is reached on 127.0.0.1. The result has no trailing ``/``.
    """
    api_base = env.get("OLLAMA_API_BASE", "").strip()
    if api_base:
        return api_base.rstrip("/")
    host = env.get("OLLAMA_HOST", "").strip()
    if not host:
        return DEFAULT_OLLAMA_URL
    parts = urlsplit(host if "://" in host else f"http://{host}")
    hostname = parts.hostname or "127.0.0.1"
    if hostname in ("0.0.0.0", "::"):
        hostname = "127.0.0.1"
    if ":" in hostname:
        hostname = f"[{hostname}]"
    try:
        port = parts.port or _OLLAMA_PORT
    except ValueError:  # a port that is not a number: Ollama itself would refuse it
        port = _OLLAMA_PORT
    return f"{parts.scheme or 'http'}://{hostname}:{port}"


def ollama_chat_model(listed: Sequence[str]) -> str | None:
    """The first model Ollama lists that can chat (embedding models cannot), as a litellm string."""
    for name in listed:
        if name and "embed" not in name.lower():
            return f"ollama_chat/{name}"
    return None


def choose_model(env: Mapping[str, str], ollama_models: Sequence[str] | None = None) -> ModelChoice | None:
    """The model to use when none is configured, or ``None`` when nothing is usable.

    ``env`` is the environment of the process that will call the model;
    ``ollama_models`` what the local Ollama listed (``None``: it did not answer).
    Blank variables count as unset.
    """
    for provider in PROVIDERS:
        key = _set_key(provider, env)
        if key is not None:
            return ModelChoice(provider.name, provider.model, key, None, f"{key} is set")
    if ollama_models is not None:
        model = ollama_chat_model(ollama_models)
        if model is not None:
            url = ollama_url(env)
            return ModelChoice("ollama", model, None, url, f"Ollama answers at {url}")
    return None


def provider_statuses(env: Mapping[str, str], ollama_models: Sequence[str] | None) -> list[ProviderStatus]:
    """Every provider of the preference order, usable or not, in that order."""
    rows = []
    for provider in PROVIDERS:
        key = _set_key(provider, env)
        source = ", ".join(f"{n} {'set' if n == key else 'not set'}" for n in provider.key_envs)
        rows.append(ProviderStatus(provider.name, key is not None, source, provider.model))
    url = ollama_url(env)
    model = ollama_chat_model(ollama_models) if ollama_models is not None else None
    if ollama_models is None:
        state = "not answering"
    elif model is None:
        state = "answers, no chat model pulled (ollama pull <model>)"
    else:
        state = "answers"
    rows.append(ProviderStatus("ollama", model is not None, f"{url} {state}", model))
    return rows


def provider_key(model: str) -> str | None:
    """The variable holding the key of ``model``'s provider, when it is a well-known one."""
    provider = (
        model.split("/", 1)[0] if "/" in model else ("anthropic" if model.startswith("claude") else "openai")
    )
    return _PROVIDER_KEYS.get(provider)


def how_to_choose(settings_file: str) -> str:
    """What a user sets to get a model: the key variables, Ollama, the setting and its file."""
    keys = ", ".join(" or ".join(p.key_envs) for p in PROVIDERS)
    return (
        f"export one of {keys} where `jidocode up` runs (a model is then picked for it), "
        f"or run Ollama ({DEFAULT_OLLAMA_URL}, or OLLAMA_HOST); or choose the model: "
        f'"llm": {{"model": "anthropic/claude-sonnet-4-6"}} in {settings_file} ({SETTINGS_KEY}), '
        f"or {MODEL_ENV}=<provider>/<model> in the environment of `jidocode up`, "
        "or `jidocode chat --model` for one conversation; `jidocode models` shows what is usable"
    )
