"""The provider registry: keys to configured providers, lazy imports, errors naming what was wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jidocode.services.prd.config import ProviderSettings
from jidocode.services.prd.providers.base import (
    IterationRequest,
    Provider,
    ProviderCapabilities,
    ProviderContext,
)
from jidocode.services.prd.providers.registry import BUILTINS, ProviderRegistry
from jidocode.shared.errors import InvalidInput


class Instant:
    """A provider that answers at once (what the benchmark registers)."""

    def __init__(self, key: str = "instant", settings: ProviderSettings | None = None) -> None:
        self.key = key
        self.settings = settings

    def name(self) -> str:
        return self.key

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(streaming=False, tool_calls=False, sandbox_control=False)

    async def run_iteration(self, request: IterationRequest) -> object:
        raise NotImplementedError


def test_the_builtins_are_the_four_providers() -> None:
    assert sorted(BUILTINS) == ["claude", "codex", "gemini", "jidocode"]
    assert ProviderRegistry().keys() == ["claude", "codex", "gemini", "jidocode"]


def test_an_unknown_key_names_it_and_the_known_keys() -> None:
    with pytest.raises(InvalidInput) as caught:
        ProviderRegistry().resolve("cursor")
    assert "'cursor'" in caught.value.message
    assert "claude, codex, gemini, jidocode" in caught.value.message
    assert caught.value.details["known"] == ["claude", "codex", "gemini", "jidocode"]


def test_register_adds_a_provider_with_its_settings() -> None:
    registry = ProviderRegistry({"instant": {"model": "m"}})
    registry.register("instant", lambda settings, context: Instant(settings=settings))
    provider = registry.resolve("instant")
    assert isinstance(provider, Provider) and isinstance(provider, Instant)
    assert provider.settings == ProviderSettings(model="m")
    assert "instant" in registry.keys()  # noqa: SIM118  (a registry, not a dict: keys() is its API)


@pytest.mark.parametrize("key", ["", "Upper", "a b", "x" * 65, "1st"])
def test_register_refuses_a_bad_key(key: str) -> None:
    with pytest.raises(InvalidInput, match="provider key"):
        ProviderRegistry().register(key, lambda s, c: Instant(key))


def test_a_factory_building_another_provider_is_refused() -> None:
    registry = ProviderRegistry()
    registry.register("instant", lambda s, c: Instant("other"))
    with pytest.raises(InvalidInput, match="built as 'other'"):
        registry.resolve("instant")


def test_a_factory_rejecting_its_configuration_is_invalid_input_naming_the_key() -> None:
    def factory(settings: ProviderSettings, context: ProviderContext) -> Instant:
        raise ValueError("model must be set")

    registry = ProviderRegistry()
    registry.register("instant", factory)
    with pytest.raises(InvalidInput, match="provider 'instant' is misconfigured: model must be set"):
        registry.resolve("instant")


def test_a_module_that_cannot_be_loaded_is_named() -> None:
    registry = ProviderRegistry(builtins={"ghost": "jidocode.services.prd.providers.ghost:create"})
    with pytest.raises(InvalidInput, match=r"provider 'ghost' cannot be loaded from .*ghost:create"):
        registry.resolve("ghost")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"timeout_s": "soon"}, "providers.codex.timeout_s"),
        ({"args": "--fast"}, "providers.codex.args"),
        ({"env": {"A": 1}}, "providers.codex.env.A"),
        ({"comand": "codex"}, "providers.codex.comand"),
    ],
)
def test_a_bad_setting_names_its_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        ProviderRegistry({"codex": raw}).resolve("codex")
    assert field in caught.value.message
    assert caught.value.details["field"].startswith(field)


def test_resolving_imports_only_the_provider_resolved() -> None:
    """Core code never imports a provider's module: importing the registry (and the contract)
    imports none, resolving one imports that one only."""
    code = (
        "import sys\n"
        "from jidocode.services.prd.providers.registry import ProviderRegistry\n"
        "from jidocode.services.prd.providers.base import ProviderContext\n"
        "mods = lambda: sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "    if m.startswith('jidocode.services.prd.providers.'))\n"
        "print(mods())\n"
        "ProviderRegistry().resolve('gemini', ProviderContext())\n"
        "print(mods())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    before, after = out.stdout.splitlines()
    assert before == "['base', 'registry']"
    assert "gemini" in after and "codex" not in after and "claude" not in after and "jidocode" not in after


def test_the_jidocode_conversation_is_named_by_the_loops_iteration_id() -> None:
    from jidocode.services.prd.providers.jidocode import _conversation_id

    def req(**metadata: str) -> IterationRequest:
        return IterationRequest(work_dir="/w", prompt="p", metadata=metadata)

    assert _conversation_id(req(iteration_id="01abc")) == "01abc"
    fresh = {_conversation_id(req()), _conversation_id(req(iteration_id="a.b>"))}
    assert len(fresh) == 2 and all(len(c) == 26 and c == c.lower() for c in fresh)
