"""What the model is told: the system prompt of a conversation.

Built from, in order: a short statement of the assistant's role and the
project root; the policy in brief (``permissions`` of the effective
settings); the instructions of the global and project ``JIDO.md`` and of the
project's ``AGENTS.md`` / ``CLAUDE.md`` / ``.claude/CLAUDE.md`` (Claude Code's
two places); and a compact index of the skills,
commands and workflows (name and description only — the ``load_skill`` tool,
served by the asset loader, returns a skill's body on demand, so a large
catalogue costs little context).

:func:`build_system_prompt` is pure. :func:`read_instructions` reads the
files (each capped at :data:`MAX_FILE_CHARS`); :func:`fetch_asset_index` asks
the asset loader over the bus and degrades to an empty index (with a note)
when it does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import nats.errors
from nats.aio.subscription import Subscription
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, ProjectClient
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError
from jidocode.shared.events import EventModel
from jidocode.shared.events.assets import AssetsChanged, AssetsReloaded, SkillRegistryUpdated
from jidocode.shared.events.engine import ProjectStopped
from jidocode.shared.settings import global_home, load_settings

__all__ = [
    "INSTRUCTION_FILES",
    "MAX_DESCRIPTION_CHARS",
    "MAX_FILE_CHARS",
    "MAX_INDEX_ENTRIES",
    "AssetEntry",
    "Instruction",
    "PromptInputs",
    "SystemPrompts",
    "build_system_prompt",
    "parse_asset_index",
    "read_instructions",
]

#: Each instruction file is cut at this many characters (with a marker).
MAX_FILE_CHARS: Final = 32_000
#: At most this many skills + commands + workflows are listed.
MAX_INDEX_ENTRIES: Final = 200
MAX_DESCRIPTION_CHARS: Final = 200

#: Project files read besides ``JIDO.md``, relative to the root (``.claude/CLAUDE.md`` is where
#: Claude Code also looks for a project's memory).
INSTRUCTION_FILES: Final = ("AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md")


class Instruction(BaseModel):
    model_config = ConfigDict(frozen=True)

    source: str
    text: str


class AssetEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str  # skill | command | workflow
    name: str
    description: str = ""


class PromptInputs(BaseModel):
    model_config = ConfigDict(frozen=True)

    root: str
    instructions: tuple[Instruction, ...] = ()
    #: ``permissions`` of the effective settings (allow/ask/deny/default).
    permissions: dict[str, Any] = Field(default_factory=dict)
    assets: tuple[AssetEntry, ...] = ()
    #: Set when the asset index could not be fetched.
    assets_note: str | None = None
    tool_names: tuple[str, ...] = ()


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _policy_lines(permissions: Mapping[str, Any]) -> list[str]:
    lines = [
        "- Every path must stay inside the project root; tools refuse anything outside it.",
    ]
    for key, label in (("deny", "Denied"), ("ask", "Needs the user's approval"), ("allow", "Allowed")):
        rules = [str(r) for r in permissions.get(key) or []]
        if rules:
            shown = ", ".join(rules[:20]) + (f", … ({len(rules) - 20} more)" if len(rules) > 20 else "")
            lines.append(f"- {label}: {shown}")
    default = permissions.get("default")
    if default:
        lines.append(f"- Anything not listed: {'asks the user' if default == 'ask' else 'denied'}.")
    lines.append("- A refused or denied tool call comes back as an error: do not retry it unchanged.")
    return lines


def build_system_prompt(inputs: PromptInputs) -> str:
    """The system prompt (pure, deterministic)."""
    parts: list[str] = [
        "You are JidoCode, a coding assistant working in one project on the user's machine. "
        "Use the tools to read, search, edit and run things in the project; answer concisely, "
        "and say what you changed.",
        f"Project root: {inputs.root}",
        "## Policy\n" + "\n".join(_policy_lines(inputs.permissions)),
    ]
    for ins in inputs.instructions:
        text = ins.text.strip()
        if text:
            parts.append(f"## Instructions from {ins.source}\n{text}")
    entries = list(inputs.assets)[:MAX_INDEX_ENTRIES]
    if entries:
        lines: list[str] = []
        for kind, title in (("skill", "Skills"), ("command", "Commands"), ("workflow", "Workflows")):
            items = sorted((e for e in entries if e.kind == kind), key=lambda e: e.name)
            if items:
                lines.append(f"{title}:")
                lines.extend(
                    f"- {e.name}: {_cut(e.description, MAX_DESCRIPTION_CHARS)}"
                    if e.description
                    else f"- {e.name}"
                    for e in items
                )
        more = len(inputs.assets) - len(entries)
        if more > 0:
            lines.append(f"(… {more} more not listed)")
        hint = "Call load_skill with a skill's name to read its full instructions before using it."
        parts.append("## Available skills and commands\n" + hint + "\n" + "\n".join(lines))
    elif inputs.assets_note:
        parts.append(f"## Skills and commands\n{inputs.assets_note}")
    return "\n\n".join(parts)


def _opened_inside(fd: int, path: Path, root: Path) -> bool:
    """Whether the file open as ``fd`` (opened as ``path``) lies below ``root``, as the kernel
    resolved it (``/proc/self/fd``: what was opened, not what the path names a moment later)."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc (not Linux): the path as it resolves now
        opened = os.path.realpath(path)
    return Path(opened).is_relative_to(os.path.realpath(root))


def _read_capped(path: Path, *, inside: Path | None = None) -> str | None:
    """The start of text file ``path`` (``None``: missing, not a regular file, unreadable).

    With ``inside`` (the project root) a file is read only when what was opened lies in that
    folder and has no second name: a project's ``CLAUDE.md`` may be a link to its ``AGENTS.md``,
    but one a model pointed at the data home, ``~/.ssh`` or another project would put into the
    model's prompt, read here on the host, a file the sandbox hides from it (decision 0301).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO does not hang the open
    except OSError:
        return None
    try:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None
            if inside is not None and (info.st_nlink > 1 or not _opened_inside(fd, path, inside)):
                return None
            text = fh.read(MAX_FILE_CHARS + 1)
    except OSError:
        return None
    if len(text) > MAX_FILE_CHARS:
        text = text[:MAX_FILE_CHARS] + f"\n[… truncated at {MAX_FILE_CHARS} characters]"
    return text


def read_instructions(root: Path, *, jido_home: Path, data_dir: str = ".jido") -> tuple[Instruction, ...]:
    """Global ``JIDO.md``, the project's ``JIDO.md`` (data dir, ``.jido_code/``, root), ``AGENTS.md``,
    ``CLAUDE.md``, ``.claude/CLAUDE.md``."""
    candidates: list[tuple[str, Path, Path | None]] = [("the global JIDO.md", jido_home / "JIDO.md", None)]
    seen: set[Path] = set()
    for rel in (Path(data_dir) / "JIDO.md", Path(".jido_code") / "JIDO.md", Path("JIDO.md")):
        candidates.append((f"the project's {rel.as_posix()}", root / rel, root))
    for name in INSTRUCTION_FILES:
        candidates.append((f"the project's {name}", root / name, root))
    out: list[Instruction] = []
    for source, path, inside in candidates:
        try:
            real = path.resolve()
        except OSError:
            continue
        if real in seen:
            continue
        seen.add(real)
        text = _read_capped(path, inside=inside)
        if text is not None and text.strip():
            out.append(Instruction(source=source, text=text))
    return tuple(out)


_KINDS: Final = {"skill": "skill", "skills": "skill", "command": "command", "commands": "command",
                 "workflow": "workflow", "workflows": "workflow"}  # fmt: skip


def _entry(kind: str | None, item: Any) -> AssetEntry | None:
    if not isinstance(item, Mapping):
        return None
    raw_kind = kind or item.get("kind") or item.get("type")
    norm = _KINDS.get(str(raw_kind).lower()) if raw_kind is not None else None
    name = item.get("name")
    if norm is None or not isinstance(name, str) or not name:
        return None
    desc = item.get("description")
    return AssetEntry(kind=norm, name=name, description=desc if isinstance(desc, str) else "")


def parse_asset_index(result: Any) -> tuple[AssetEntry, ...]:
    """Accept the asset loader's ``list`` reply in either shape.

    ``[{"kind": "skill", "name", "description"}, …]`` or
    ``{"skills": [...], "commands": [...], "workflows": [...]}`` (items may
    also be wrapped as ``{"items": [...]}``/``{"assets": [...]}``). Unusable
    items are skipped.
    """
    items: Iterable[tuple[str | None, Any]]
    if isinstance(result, Mapping):
        for wrapper in ("items", "assets", "entries"):
            inner = result.get(wrapper)
            if isinstance(inner, list):
                return parse_asset_index(inner)
        pairs: list[tuple[str | None, Any]] = []
        for key, value in result.items():
            if str(key).lower() in _KINDS and isinstance(value, Sequence) and not isinstance(value, str):
                pairs.extend((str(key), v) for v in value)
        items = pairs
    elif isinstance(result, Sequence) and not isinstance(result, str):
        items = [(None, v) for v in result]
    else:
        return ()
    out = [e for kind, item in items if (e := _entry(kind, item)) is not None]
    return tuple(out)


# --- the shell: gather the inputs over the bus and from disk -------------------------


#: Signals after which a project's system prompt is rebuilt: its asset files (the layers with
#: settings.json, JIDO.md, skills and commands, and the root's JIDO.md, AGENTS.md and
#: CLAUDE.md) changed (``assets.changed``, as soon as the watcher sees them) or were reloaded.
PROMPT_STALE: Final[tuple[type[EventModel], ...]] = (
    AssetsChanged,
    AssetsReloaded,
    SkillRegistryUpdated,
    ProjectStopped,
)


class SystemPrompts:
    """Builds and caches the system prompt of each project, per asset generation.

    The project's root comes from the project service (``info``); the
    instructions and the ``permissions`` from disk; the skill/command index
    from the asset loader (``list``). Each part degrades on its own: a missing
    asset loader gives a prompt without the index (and a note), an unknown
    project gives no system prompt at all (``None``) rather than a failed call.

    A prompt is reused until the asset loader says the project's assets
    changed (:data:`PROMPT_STALE`: its watcher covers every layer, ``.claude/``
    and the instructions files of the project root, so an edited ``CLAUDE.md``
    reaches the next conversation as soon as the watcher reports it, well
    under a second), so a turn makes no request for it. ``ttl_s`` bounds how
    long a change goes unnoticed when no asset loader watches the project; a
    prompt built while the asset loader did not answer is kept only ``retry_s``.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        jido_home: Path | None = None,
        ttl_s: float = 60.0,
        retry_s: float = 5.0,
        timeout_s: float = 3.0,
    ) -> None:
        self._bus = bus
        self._jido_home = jido_home
        self._ttl_s = ttl_s
        self._retry_s = retry_s
        self._timeout_s = timeout_s
        #: project id -> (monotonic time it expires, the prompt)
        self._cache: dict[str, tuple[float, str | None]] = {}
        self._subs: list[Subscription] = []

    async def for_project(self, project_id: str) -> str | None:
        if not self._subs:
            await self._follow_reloads()
        now = time.monotonic()
        cached = self._cache.get(project_id)
        if cached is not None and now < cached[0]:
            return cached[1]
        prompt, complete = await self._build(project_id)
        self._cache[project_id] = (now + (self._ttl_s if complete else self._retry_s), prompt)
        return prompt

    def forget(self, project_id: str) -> None:
        """Drop the project's prompt: the next turn rebuilds it."""
        self._cache.pop(project_id, None)

    async def _follow_reloads(self) -> None:
        async def _stale(env: Envelope) -> None:
            if env.project_id:
                self.forget(env.project_id)

        for model in PROMPT_STALE:
            self._subs.append(await self._bus.subscribe(subjects.signal(model.TYPE), _stale))

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        self._subs.clear()

    async def _build(self, project_id: str) -> tuple[str | None, bool]:
        """The prompt, and whether every part of it was there (else it is retried sooner)."""
        try:
            info = await ProjectClient(self._bus, project_id, timeout=self._timeout_s).info()
        except JidoError:
            return None, False
        root = Path(info.root_path)
        data_dir = info.data_dir or ".jido"
        home = global_home(self._jido_home)

        def _from_disk() -> tuple[tuple[Instruction, ...], dict[str, Any]]:
            from jidocode.shared.policy.starter import starter_permissions  # the policy's own rule

            loaded = load_settings(root, jido_home=home, data_dir=data_dir)
            perms = loaded.settings.permissions
            perms = starter_permissions(perms, trusted=loaded.trusted is not False) or perms
            return (
                read_instructions(root, jido_home=home, data_dir=data_dir),
                perms.model_dump(mode="json"),
            )

        instructions, permissions = await asyncio.to_thread(_from_disk)
        note: str | None = None
        assets: tuple[AssetEntry, ...] = ()
        try:
            listed = await AssetsClient(self._bus, project_id, timeout=self._timeout_s).list()
            assets = parse_asset_index(listed.items)
        except JidoError as exc:
            note = f"(the skill and command index is unavailable right now: {exc.type})"
        prompt = build_system_prompt(
            PromptInputs(
                root=str(root),
                instructions=instructions,
                permissions=permissions,
                assets=assets,
                assets_note=note,
            )
        )
        return prompt, note is None
