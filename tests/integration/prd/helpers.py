"""Shared pieces of the PRD loop's integration tests: a fixture git repository, the loop's events
followed on the bus (waits on events, never sleeps), and the stream/file comparison."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.js.api import ConsumerConfig, DeliverPolicy

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.services.prd.prompt import DONE_MARKER
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope

__all__ = ["WAIT", "Events", "Router", "done", "git", "git_repo", "jsonl", "stream_events"]

#: Bound of every wait on an event (a loaded machine).
WAIT = 60.0


def done(text: str) -> Reply:
    """A final answer that reports its story done (ends with the completion marker)."""
    return Reply.answer(f"{text}\n{DONE_MARKER}")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=30
    ).stdout.strip()


def git_repo(root: Path) -> Path:
    """A git repository with one commit (and an identity of its own)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Fixture")
    git(root, "config", "user.email", "fixture@example.invalid")
    (root / "README.md").write_text("fixture\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "initial")
    return root


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Events:
    """Every loop event of a project, as it arrives on core NATS."""

    def __init__(self) -> None:
        self.seen: list[Envelope] = []
        self.changed = asyncio.Condition()

    async def follow(self, bus: Bus, project_id: str) -> None:
        await bus.subscribe(subjects.prd_event_filter(project_id), self._on)

    async def _on(self, env: Envelope) -> None:
        async with self.changed:
            self.seen.append(env)
            self.changed.notify_all()

    def of(self, prd: str, type_: str | None = None) -> list[dict[str, Any]]:
        """The ``data`` of ``prd``'s events (of ``type_``), in arrival order."""
        return [
            {**e.data, "type": e.type}
            for e in self.seen
            if e.data.get("prd") == prd and (type_ is None or e.type == type_)
        ]

    async def wait(self, pred: Callable[[], bool], timeout: float = WAIT) -> None:
        async def _wait() -> None:
            async with self.changed:
                await self.changed.wait_for(pred)

        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            raise AssertionError("condition not met; events so far:\n" + self.summary()) from None

    def summary(self) -> str:
        return "\n".join(
            f"{e.data.get('prd')} #{e.data.get('seq')} {e.type} "
            + str({k: v for k, v in e.data.items() if k not in ("project_id", "prd", "seq", "metadata")})[
                :300
            ]
            for e in self.seen
        )

    async def wait_state(self, prd: str, state: str, count: int = 1) -> None:
        """Until ``prd``'s loop entered ``state`` ``count`` times."""
        await self.wait(
            lambda: sum(1 for e in self.of(prd, "prd.loop.state_changed") if e["to_state"] == state) >= count
        )


async def stream_events(
    bus: Bus, project_id: str, prd: str, count: int | None = None
) -> list[dict[str, Any]]:
    """The first ``count`` events of ``prd`` on JIDO_PRD (every one stored when None), in stream order."""
    if count is None:
        info = await bus.js.stream_info(
            subjects.STREAM_PRD, subjects_filter=subjects.prd_event_filter(project_id, prd)
        )
        count = sum((info.state.subjects or {}).values())
    sub = await bus.js.subscribe(
        subjects.prd_event_filter(project_id, prd),
        stream=subjects.STREAM_PRD,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    out: list[dict[str, Any]] = []
    try:
        while len(out) < count:
            msg = await sub.next_msg(timeout=WAIT)
            out.append(json.loads(msg.data))
    finally:
        await sub.unsubscribe()
    return out


_KEY = re.compile(r"document '([^']+)'.*?Your story now: (\S+): .*? \(attempt (\d+)\)", re.S)


class Router:
    """``(prd, story id, attempt) -> [reply per turn]``; ``first[key]`` answers the first call only."""

    def __init__(self) -> None:
        self.scripts: dict[tuple[str, str, int], list[Reply]] = {}
        self.first: dict[tuple[str, str, int], Reply] = {}
        self.calls: dict[tuple[str, str, int], int] = {}
        #: Set when a key's first model call arrived (the server may answer in another thread).
        self.asked: dict[tuple[str, str, int], threading.Event] = {}

    async def wait_asked(self, key: tuple[str, str, int]) -> None:
        event = self.asked.setdefault(key, threading.Event())
        assert await asyncio.to_thread(event.wait, WAIT), f"the model was never asked for {key}"

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        first = next((m for m in messages if m.get("role") == "user"), {})
        text = first.get("content")
        if isinstance(text, list):
            text = " ".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
        found = _KEY.search(str(text or ""))
        if found is None:
            return Reply.error(500, "not a story prompt")
        key = (found.group(1), found.group(2), int(found.group(3)))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn == 0:
            self.calls[key] = self.calls.get(key, 0) + 1
            self.asked.setdefault(key, threading.Event()).set()
            if self.calls[key] == 1 and key in self.first:
                return self.first[key]
        script = self.scripts.get(key, [Reply.answer("nothing to do")])
        return script[turn] if turn < len(script) else Reply.answer("done")
