"""Notices when a loop completes, fails or pauses (``notify`` in the PRD configuration).

Each :class:`~.config.NotifyHook` whose ``on`` names the state the loop entered gets one notice:

- a **command** runs like a quality check (:func:`.quality.run_checks`: the work dir, the OS
  sandbox, no network, its timeout) as ``bash -c <command> notify <state> <prd> <reason>``: the
  notice travels as positional arguments (``$1``-``$3``), never inside the command text;
- a **webhook** is a ``POST`` of the notice as JSON from the service host: ``http``/``https`` only
  (checked when the configuration is read), no redirects followed, no proxy from the environment,
  the whole exchange within the hook's ``timeout_s`` and at most :data:`MAX_RESPONSE_BYTES` of
  the answer read. A status outside 2xx is a failure.

Hooks are off by default and come only from trusted layers (an untrusted project's ``prd`` key is
ignored whole, :mod:`.config`). A hook that fails is reported, one line each, for the loop to log
as an event; nothing here raises or changes the loop's state.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Final

import httpx

from jidocode.shared.errors import JidoError

from . import quality
from .config import NotifyHook

__all__ = ["MAX_REASON_CHARS", "MAX_RESPONSE_BYTES", "Notice", "send_notices"]

#: Characters of the reason a notice carries.
MAX_REASON_CHARS: Final = 2000
#: Bytes of a webhook's answer read (the status is what counts).
MAX_RESPONSE_BYTES: Final = 64 * 1024
#: Characters of a failure's detail kept.
_DETAIL: Final = 300


@dataclass(frozen=True)
class Notice:
    """What a notice says: which loop entered which state, and why."""

    project_id: str
    prd: str
    state: str
    reason: str = ""
    story_id: str = ""
    branch: str = ""
    work_dir: str = ""
    iterations: int = 0
    cost_usd: float = 0.0

    def payload(self) -> dict[str, object]:
        """The JSON body of a webhook (``type`` first)."""
        return {"type": "prd.notice", **asdict(self), "reason": self.reason[:MAX_REASON_CHARS]}


async def send_notices(hooks: Sequence[NotifyHook], notice: Notice) -> list[str]:
    """Send ``notice`` to each hook listening for its state, in order; one line per failure."""
    failures: list[str] = []
    for index, hook in enumerate(hooks):
        if notice.state not in hook.on:
            continue
        problem = await (_post(hook, notice) if hook.url else _run(hook, notice))
        if problem:
            target = hook.url if hook.url else "command"
            failures.append(f"notify[{index}] ({target[:200]}): {problem}"[:1000])
    return failures


async def _post(hook: NotifyHook, notice: Notice) -> str:
    """POST the notice to the hook's URL; ``""`` when it answered 2xx, else what went wrong."""
    body = json.dumps(notice.payload()).encode()
    headers = {"content-type": "application/json", "user-agent": "jidocode-prd-notify"}
    try:
        async with (
            asyncio.timeout(hook.timeout_s),
            httpx.AsyncClient(timeout=hook.timeout_s, trust_env=False, follow_redirects=False) as http,
            http.stream("POST", hook.url, content=body, headers=headers) as response,
        ):
            await _read_capped(response)
            status = response.status_code
    except TimeoutError:
        return f"no answer within {hook.timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {str(exc)[:_DETAIL] or 'request failed'}"
    if 300 <= status < 400:
        return f"answered {status} (a redirect, not followed)"
    if not 200 <= status < 300:
        return f"answered {status}"
    return ""


async def _read_capped(response: httpx.Response) -> None:
    """Read at most :data:`MAX_RESPONSE_BYTES` of the answer, then stop."""
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read >= MAX_RESPONSE_BYTES:
            return


async def _run(hook: NotifyHook, notice: Notice) -> str:
    """Run the hook's command in the sandbox in the work dir; ``""`` when it exited 0."""
    try:
        report = await quality.run_checks(
            notice.work_dir,
            [hook.command],
            timeout_s=hook.timeout_s,
            output_cap=quality.MIN_OUTPUT_CAP * 4,
            arguments=(
                "notify",
                notice.state,
                notice.prd,
                notice.reason[:MAX_REASON_CHARS].replace("\0", ""),
            ),
        )
    except (JidoError, OSError) as exc:  # a work dir gone: reported, never fatal
        return f"{type(exc).__name__}: {str(exc)[:_DETAIL]}"
    check = report.checks[0]
    if check.ok:
        return ""
    why = "timed out" if check.timed_out else f"exit {check.exit_code}"
    return f"{why}: {check.output.strip()[-_DETAIL:]}"
