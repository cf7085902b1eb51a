"""The loop's configuration: ``$XDG_CONFIG_HOME/daedalus/config.toml`` (or ``~/.config/…``) under
the ``prd`` key of JidoCode's settings (global, then the project's when trusted).

STUB (interface fixed; the ``prd-core`` branch implements it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from .retry import RetryPolicy

__all__ = ["PrdConfig", "ProviderSettings", "config_toml_path", "load_config"]


class ProviderSettings(BaseModel):
    """One provider's configuration (``[providers.<key>]``)."""

    #: The CLI to run (codex/claude/gemini); empty: the provider's default name on PATH.
    command: str = ""
    #: Extra arguments placed before the provider's own.
    args: list[str] = []
    model: str = ""
    #: Extra environment for the CLI (API keys by reference are the user's business).
    env: dict[str, str] = {}
    timeout_s: float = 1800.0


class PrdConfig(BaseModel):
    provider: str = "jidocode"
    model: str = ""
    retry: RetryPolicy = RetryPolicy()
    #: Quality commands, run in the work dir inside the sandbox after each iteration, in order.
    quality_commands: list[str] = []
    check_timeout_s: float = 600.0
    check_output_cap: int = 65536
    iteration_timeout_s: float = 1800.0
    approval_policy: str = "never"
    sandbox_policy: str = "workspace-write"
    #: Commit each passed story.
    commit: bool = True
    #: Destructive git actions (removing a worktree with changes, deleting a branch) allowed.
    allow_destructive_git: bool = False
    providers: dict[str, ProviderSettings] = {}


def config_toml_path(env: Mapping[str, str]) -> Path:
    raise NotImplementedError


def load_config(
    root: str, *, env: Mapping[str, str] | None = None, jido_home: str | None = None
) -> PrdConfig:
    """The effective configuration for project ``root``; ``InvalidInput`` naming the file and field."""
    raise NotImplementedError
