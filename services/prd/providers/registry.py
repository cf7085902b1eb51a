"""The provider registry (seed 004 "Provider registry"): a key resolves to a configured provider.

Built-in providers are a table ``key -> "module:factory"``; a provider's module is imported (with
:mod:`importlib`) only when its key is resolved, so the loop and the rest of the core never import
a provider's package (nor, through it, a CLI's or SDK's). :meth:`ProviderRegistry.register` adds a
factory in process (tests and the benchmark register an instant provider).

Every refusal is :class:`~jidocode.shared.errors.InvalidInput` naming what was wrong: an unknown
key (with the known keys), a setting that does not validate (``providers.<key>.<field>``), a
factory that rejects its configuration, a provider module that cannot be imported.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from jidocode.services.prd.config import ProviderSettings
from jidocode.shared.errors import InvalidInput

from .base import Provider, ProviderContext, ProviderFactory

__all__ = ["BUILTINS", "ProviderRegistry"]

#: The built-in providers, imported only when resolved.
BUILTINS: Final[Mapping[str, str]] = {
    "jidocode": "jidocode.services.prd.providers.jidocode:create",
    "codex": "jidocode.services.prd.providers.codex:create",
    "claude": "jidocode.services.prd.providers.claude:create",
    "gemini": "jidocode.services.prd.providers.gemini:create",
}

_KEY: Final = re.compile(r"^[a-z][a-z0-9_\-]{0,63}$")


def _field(err: Any) -> str:
    return ".".join(str(part) for part in err.get("loc", ())) or "(settings)"


class ProviderRegistry:
    """Resolves provider keys to configured instances.

    ``settings``: the ``providers`` table of the loop's configuration (``PrdConfig.providers``),
    each a :class:`ProviderSettings` or its raw mapping (validated on :meth:`resolve`).
    """

    def __init__(
        self,
        settings: Mapping[str, ProviderSettings | Mapping[str, Any]] | None = None,
        *,
        builtins: Mapping[str, str] = BUILTINS,
    ) -> None:
        self._settings: dict[str, ProviderSettings | Mapping[str, Any]] = dict(settings or {})
        self._paths: dict[str, str] = dict(builtins)
        self._factories: dict[str, ProviderFactory] = {}

    def keys(self) -> list[str]:
        """Every key this registry resolves, sorted."""
        return sorted({*self._paths, *self._factories})

    def register(self, key: str, factory: ProviderFactory) -> None:
        """Add (or replace) the provider ``key``, built by ``factory(settings, context)``."""
        if not _KEY.match(key):
            raise InvalidInput(
                f"provider key {key!r} is invalid: lowercase letters, digits, '-' and '_', "
                "starting with a letter, at most 64 characters",
                details={"key": key},
            )
        self._factories[key] = factory

    def settings_for(
        self, key: str, override: ProviderSettings | Mapping[str, Any] | None = None
    ) -> ProviderSettings:
        """The validated settings of ``key`` (``override`` instead of the configured ones)."""
        raw = override if override is not None else self._settings.get(key)
        if raw is None:
            return ProviderSettings()
        if isinstance(raw, ProviderSettings):
            raw = raw.model_dump()
        try:
            settings = ProviderSettings.model_validate(dict(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = f"providers.{key}.{_field(err)}"
            raise InvalidInput(
                f"provider {key!r} is misconfigured: {field}: {err.get('msg', 'invalid')}",
                details={"provider": key, "field": field},
            ) from None
        if settings.timeout_s <= 0:
            field = f"providers.{key}.timeout_s"
            raise InvalidInput(
                f"provider {key!r} is misconfigured: {field} must be > 0 (got {settings.timeout_s:g})",
                details={"provider": key, "field": field},
            )
        return settings

    def _factory(self, key: str) -> ProviderFactory:
        factory = self._factories.get(key)
        if factory is not None:
            return factory
        path = self._paths.get(key)
        if path is None:
            raise InvalidInput(
                f"unknown provider {key!r}; known providers: {', '.join(self.keys())}",
                details={"provider": key, "known": self.keys()},
            )
        module_name, _, attr = path.partition(":")
        try:
            module = importlib.import_module(module_name)
            found: ProviderFactory = getattr(module, attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidInput(
                f"provider {key!r} cannot be loaded from {path}: {exc}",
                details={"provider": key, "factory": path},
            ) from exc
        return found

    def resolve(
        self,
        key: str,
        context: ProviderContext | None = None,
        *,
        settings: ProviderSettings | Mapping[str, Any] | None = None,
    ) -> Provider:
        """The provider ``key`` configured with its settings (or ``settings``) and ``context``."""
        factory = self._factory(key)
        validated = self.settings_for(key, settings)
        try:
            provider = factory(validated, context or ProviderContext())
        except InvalidInput as exc:
            raise InvalidInput(
                f"provider {key!r} is misconfigured: {exc.message}",
                details={"provider": key, **exc.details},
            ) from None
        except ValueError as exc:
            raise InvalidInput(
                f"provider {key!r} is misconfigured: {exc}", details={"provider": key}
            ) from None
        if provider.name() != key:
            raise InvalidInput(
                f"provider {key!r} was built as {provider.name()!r}: a factory must build the "
                "provider of its key",
                details={"provider": key},
            )
        return provider
