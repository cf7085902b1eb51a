"""Skill routes dispatched by signals (seed 001 ``Skill.handle_signal``).

A CloudEvent published on ``jido.assets.<p>.signal`` whose ``type`` is a route
of one of the project's skills (``pdf/extract/text``) runs that route's action
with the event's ``data`` as params, exactly as the ``invoke_skill`` tool does:
the dispatcher asks the tool runner to run ``invoke_skill`` (so the project
policy authorizes it, and the action's own tool call goes through the tool
runner and its sandbox again). The outcome is published as
``skill.route.completed`` or ``skill.route.failed`` on ``jido.sig.*``, carrying
the incoming event's id (``signal_id``, also the ``causationid``).

:func:`match_route` is the pure part: which skill routes a signal type. When
several skills route the same type, the signal must name one in its ``skill``
extension (``ce-skill``), else it is refused naming them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from jidocode.services.asset_loader.generation import Generation
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import Conflict, InvalidInput, JidoError, NotFound
from jidocode.shared.events.assets import SkillRouteCompleted, SkillRouteFailed
from jidocode.shared.events.tools import ToolCallMeta, ToolResult

__all__ = ["DEFAULT_MAX_DISPATCHES", "SIGNAL_VERB", "SkillSignals", "match_route", "skills_routing"]

#: The verb of ``jido.assets.<p>.<verb>`` routed signals are published on.
SIGNAL_VERB: Final = "signal"
#: Routed signals whose action runs at the same time, per asset-loader replica.
DEFAULT_MAX_DISPATCHES: Final = 32

RunTool = Callable[[str, str, dict[str, Any], ToolCallMeta], Awaitable[ToolResult]]
Publish = Callable[[str, SkillRouteCompleted | SkillRouteFailed, Envelope], Awaitable[None]]


def skills_routing(gen: Generation, signal_type: str) -> list[str]:
    """The skills with a route equal to ``signal_type``, by name."""
    return sorted(s.name for s in gen.skills.values() if any(r.path == signal_type for r in s.router))


def match_route(gen: Generation, signal_type: str, skill: str | None = None) -> str:
    """The skill whose route ``signal_type`` is; :class:`NotFound` or :class:`Conflict` naming why not."""
    found = skills_routing(gen, signal_type)
    if skill is not None:
        if skill not in gen.skills:
            raise NotFound(f"no skill named {skill!r}", details={"skill": skill})
        if skill not in found:
            raise NotFound(
                f"skill {skill!r} has no route {signal_type!r}",
                details={
                    "skill": skill,
                    "route": signal_type,
                    "routes": [r.path for r in gen.skills[skill].router],
                },
            )
        return skill
    if not found:
        raise NotFound(
            f"no skill of the project routes signals of type {signal_type!r}",
            details={
                "route": signal_type,
                "routes": sorted({r.path for s in gen.skills.values() for r in s.router}),
            },
        )
    if len(found) > 1:
        raise Conflict(
            f"skills {', '.join(found)} all route {signal_type!r}: name one in the signal's skill extension",
            details={"route": signal_type, "skills": found},
        )
    return found[0]


class SkillSignals:
    """Dispatches routed signals of every project; at most ``max_dispatches`` run at once.

    ``run_tool(project_id, name, args, meta)`` is the tool runner; ``publish(project_id,
    event, cause)`` publishes an outcome signal. Past the limit :meth:`submit` waits, so
    the subscription stops taking messages (NATS keeps them as pending).
    """

    def __init__(
        self,
        generation: Callable[[str], Awaitable[Generation]],
        run_tool: RunTool,
        publish: Publish,
        *,
        max_dispatches: int = DEFAULT_MAX_DISPATCHES,
    ) -> None:
        if max_dispatches < 1:
            raise ValueError(f"max_dispatches must be at least 1, got {max_dispatches}")
        self._generation = generation
        self._run_tool = run_tool
        self._publish = publish
        self.max_dispatches = max_dispatches
        self._slots = asyncio.Semaphore(max_dispatches)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def submit(self, project_id: str, env: Envelope) -> None:
        """Take a slot (waiting while all are busy) and dispatch ``env`` in the background."""
        await self._slots.acquire()
        task = asyncio.create_task(self._dispatch_in_slot(project_id, env), name=f"skill-signal-{env.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dispatch_in_slot(self, project_id: str, env: Envelope) -> None:
        try:
            await self.dispatch(project_id, env)
        finally:
            self._slots.release()

    async def dispatch(self, project_id: str, env: Envelope) -> None:
        """Run the route ``env.type`` names and publish its outcome (never raises a :class:`JidoError`)."""
        skill: str | None = None
        try:
            named = env.extensions.get("skill")
            if named is not None and not isinstance(named, str):
                raise InvalidInput("the skill extension must be a string", details={"skill": named})
            params = {} if env.data is None else env.data
            if not isinstance(params, Mapping):
                raise InvalidInput(
                    f"the data of a routed signal are the action's params: a JSON object, not {type(params).__name__}",
                    details={"route": env.type},
                )
            gen = await self._generation(project_id)
            skill = match_route(gen, env.type, named)
            meta = ToolCallMeta(
                request_id=f"signal-{env.id}",
                conversation_id=_ext(env, "conversationid"),
                correlation_id=_ext(env, "correlationid") or env.id,
            )
            args = {"skill": skill, "route": env.type, "params": dict(params)}
            result = await self._run_tool(project_id, "invoke_skill", args, meta)
        except JidoError as exc:
            error = exc.to_info().model_dump(mode="json")
            await self._publish(
                project_id,
                SkillRouteFailed(
                    project_id=project_id, signal_id=env.id, route=env.type, skill=skill, error=error
                ),
                env,
            )
            return
        if result.ok:
            event: SkillRouteCompleted | SkillRouteFailed = SkillRouteCompleted(
                project_id=project_id, signal_id=env.id, route=env.type, skill=skill, data=result.data
            )
        else:
            info = result.error.model_dump(mode="json") if result.error is not None else {"type": "error"}
            event = SkillRouteFailed(
                project_id=project_id,
                signal_id=env.id,
                route=env.type,
                skill=skill,
                error=info,
                data=result.data,
            )
        await self._publish(project_id, event, env)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _ext(env: Envelope, name: str) -> str | None:
    value = env.extensions.get(name)
    return value if isinstance(value, str) else None
