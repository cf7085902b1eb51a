"""Each CLI's command line (pure): argv only, the prompt as one item or stdin, settings in place."""

from __future__ import annotations

import pytest

from jidocode.services.prd.config import ProviderSettings
from jidocode.services.prd.providers import claude, codex, gemini
from jidocode.services.prd.providers.base import IterationRequest, ProviderContext, ProviderError, full_prompt
from jidocode.services.prd.providers.cli_stream import CliProvider

PROMPT = 'fix it; rm -rf / "$(id)"'


def _req(**kw: object) -> IterationRequest:
    return IterationRequest(work_dir="/w", prompt=PROMPT, **kw)  # type: ignore[arg-type]


def test_codex_argv_reads_the_prompt_on_stdin() -> None:
    provider = CliProvider(codex.FLAVOR, ProviderSettings(args=["-c", "x=1"]), ProviderContext())
    argv, stdin = provider.argv(_req(model="gpt-5-codex", sandbox_policy="read-only"), "/bin/codex")
    assert argv == [
        "/bin/codex",
        "-c",
        "x=1",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--sandbox",
        "read-only",
        "-m",
        "gpt-5-codex",
        "-",
    ]
    assert stdin == PROMPT


def test_codex_falls_back_to_workspace_write_for_an_unknown_sandbox_policy() -> None:
    argv, _ = codex.build(_req(sandbox_policy="whatever"), ProviderSettings(), "")
    assert argv[argv.index("--sandbox") + 1] == "workspace-write" and "-m" not in argv


@pytest.mark.parametrize(("policy", "mode"), [("never", "acceptEdits"), ("on-request", "default")])
def test_claude_permission_mode_follows_the_approval_policy(policy: str, mode: str) -> None:
    argv, stdin = claude.build(_req(approval_policy=policy), ProviderSettings(), "sonnet")
    assert argv == [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "sonnet",
        "--permission-mode",
        mode,
    ]
    assert stdin == PROMPT


def test_gemini_takes_the_prompt_as_one_argument_within_its_cap() -> None:
    argv, stdin = gemini.build(_req(), ProviderSettings(), "")
    assert argv == ["--output-format", "stream-json", "--approval-mode", "auto_edit", "-p", PROMPT]
    assert stdin is None
    with pytest.raises(ProviderError) as caught:
        gemini.build(
            IterationRequest(work_dir="/w", prompt="x" * (gemini.PROMPT_CAP + 1)), ProviderSettings(), ""
        )
    assert caught.value.kind == "fatal"


def test_the_model_comes_from_the_request_then_the_settings_then_the_context() -> None:
    def model_of(request_model: str, settings_model: str, default: str) -> str:
        provider = CliProvider(
            codex.FLAVOR, ProviderSettings(model=settings_model), ProviderContext(default_model=default)
        )
        argv, _ = provider.argv(_req(model=request_model), "codex")
        return argv[argv.index("-m") + 1] if "-m" in argv else ""

    assert model_of("a", "b", "c") == "a"
    assert model_of("", "b", "c") == "b"
    assert model_of("", "", "c") == "c"
    assert model_of("", "", "") == ""


def test_env_is_set_inside_the_sandbox_by_env() -> None:
    provider = CliProvider(claude.FLAVOR, ProviderSettings(env={"B": "2", "A": "1"}), ProviderContext())
    argv, _ = provider.argv(_req(), "/bin/claude")
    assert argv[:4] == ["/usr/bin/env", "A=1", "B=2", "/bin/claude"]


def test_context_files_are_named_after_the_prompt() -> None:
    assert full_prompt(_req()) == PROMPT
    text = full_prompt(_req(context_files=["docs/a.md", "src/b.py"]))
    assert text.startswith(PROMPT) and text.endswith("- docs/a.md\n- src/b.py")
