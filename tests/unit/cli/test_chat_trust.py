"""`jidocode chat` at start: the untrusted line on stderr, and the offer on a terminal."""

from __future__ import annotations

import pytest

from jidocode.cli import chat as chat_cli
from jidocode.shared.trust import TrustState


class _Client:
    def __init__(self, trusted: bool) -> None:
        self.state = TrustState(root="/r", trusted=trusted, store="/h/trusted_projects.json")
        self.trusted_calls = 0

    @property
    def trust_state(self) -> TrustState:
        return self.state

    async def trust(self) -> TrustState:
        self.trusted_calls += 1
        self.state = self.state.model_copy(update={"trusted": True, "via": "/r"})
        return self.state


class _Terminal:
    def __init__(self) -> None:
        self.queue: list[str | None] = []
        self.asked: list[str] = []

    def append(self, answer: str | None) -> None:
        self.queue.append(answer)

    async def read_line(self, prompt: str) -> str | None:
        self.asked.append(prompt)
        return self.queue.pop(0) if self.queue else None


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    terminal = _Terminal()
    monkeypatch.setattr(chat_cli, "_read_line", terminal.read_line)
    return terminal


async def test_untrusted_line_and_yes_trusts(answers: _Terminal, capsys: pytest.CaptureFixture[str]) -> None:
    client = _Client(trusted=False)
    answers.append("y")
    await chat_cli._check_trust(client, offer=True)  # type: ignore[arg-type]
    err = " ".join(capsys.readouterr().err.split())
    assert "Do you trust the files in this folder? /r Untrusted, the assistant may only read" in err
    assert "(the same as `jidocode projects trust /r`" in err
    assert client.trusted_calls == 1 and "trusted /r (recorded in /h/trusted_projects.json)" in err


async def test_no_or_no_terminal_does_not_trust(
    answers: _Terminal, capsys: pytest.CaptureFixture[str]
) -> None:
    client = _Client(trusted=False)
    answers.append("n")
    await chat_cli._check_trust(client, offer=True)  # type: ignore[arg-type]
    await chat_cli._check_trust(client, offer=False)  # type: ignore[arg-type]
    assert client.trusted_calls == 0
    assert len(answers.asked) == 1  # no question without a terminal
    err = " ".join(capsys.readouterr().err.split())
    assert "continuing untrusted: the assistant may only read here; `jidocode projects trust /r`" in err
    assert err.count("project is untrusted") == 1  # the line without a terminal
    assert "run `jidocode projects trust /r`" in err


async def test_trusted_project_prints_nothing(answers: _Terminal, capsys: pytest.CaptureFixture[str]) -> None:
    await chat_cli._check_trust(_Client(trusted=True), offer=True)  # type: ignore[arg-type]
    assert capsys.readouterr().err == "" and answers.asked == []
