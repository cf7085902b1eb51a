"""Sub-agents end to end: every service in this process (real tool runner, sandboxed bash), the
real litellm adapter against the scripted model server, one system shared by the module.

The scripted model answers by conversation: a :class:`Router` keys on the first user message
(the parent's message, or the prompt a ``task`` call handed to a child) and on how many
answers the conversation has had, so parents and children running in parallel each get
their own script, whatever order their requests arrive in.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.conversation.core import RunToolIntent, Signal
from jidocode.services.conversation.subagents.core import SubagentSettings, child_conversation_id
from jidocode.services.conversation.subagents.runner import ParentView, SubagentRunner
from jidocode.services.conversation.subagents.slots import SubagentSlots
from jidocode.services.registry import serve_many
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.conversation import ToolCallCompleted
from jidocode.shared.ledger import LedgerReader, combine
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: Bounds of waits on conditions (a loaded machine), never sleeps.
WAIT = 60.0
#: A marker in the child's long-running command, to find its process.
SLEEP_MARK = "31.4159"


class Router:
    """A stateless responder: ``(first user message, answers so far) -> reply``."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Reply]] = {}

    def add(self, first_message: str, *replies: Reply) -> None:
        self.scripts[first_message] = list(replies)

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        first = next((m for m in messages if m.get("role") == "user"), {})
        text = first.get("content")
        if isinstance(text, list):
            text = " ".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
        script = self.scripts.get(str(text or ""))
        if script is None:
            return Reply.error(500, f"no script for {text!r}")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= len(script):
            return Reply.error(500, f"script of {text!r} exhausted at turn {turn}")
        return script[turn]


class System:
    def __init__(self, bus: Bus, project_id: str, root: Path, llm: ScriptedLlm, router: Router) -> None:
        self.bus = bus
        self.project_id = project_id
        self.root = root
        self.llm = llm
        self.router = router
        self.client = ConversationsClient(bus, project_id, timeout=30)
        self.settings = {
            "model": "openai/scripted",
            "api_base": llm.api_base,
            "max_retries": 0,
            "timeout_s": 30.0,
        }
        self.signals: list[Envelope] = []
        self.changed = asyncio.Condition()

    async def on_signal(self, env: Envelope) -> None:
        async with self.changed:
            self.signals.append(env)
            self.changed.notify_all()

    async def wait_signal(self, pred: Callable[[Envelope], bool], timeout: float = WAIT) -> Envelope:
        async def _find() -> Envelope:
            async with self.changed:
                await self.changed.wait_for(lambda: any(pred(e) for e in self.signals))
                return next(e for e in self.signals if pred(e))

        return await asyncio.wait_for(_find(), timeout)

    async def ask(self, cid: str, text: str) -> None:
        await self.client.start(cid, settings=self.settings)
        await self.client.send_event(cid, "conversation.user.message", {"text": text})

    async def timeline(self, cid: str) -> list[dict[str, Any]]:
        return list((await self.client.get_projection(cid, "timeline")).value)

    async def wait_timeline(
        self, cid: str, pred: Callable[[list[dict[str, Any]]], bool], timeout: float = WAIT
    ) -> list[dict[str, Any]]:
        """The timeline once ``pred`` holds, followed on the conversation's output (no polling)."""
        seen = asyncio.Event()

        async def on_out(env: Envelope) -> None:
            seen.set()

        sub = await self.bus.subscribe(subjects.conversation_out_filter(self.project_id, cid), on_out)
        try:

            async def _wait() -> list[dict[str, Any]]:
                while True:
                    seen.clear()
                    timeline = await self.timeline(cid)
                    if pred(timeline):
                        return timeline
                    await seen.wait()

            return await asyncio.wait_for(_wait(), timeout)
        finally:
            await sub.unsubscribe()

    async def final(self, cid: str) -> list[dict[str, Any]]:
        """The timeline once the conversation answered its (last) message."""
        return await self.wait_timeline(cid, _answered)


def _answered(timeline: list[dict[str, Any]]) -> bool:
    return bool(timeline) and any(
        e["type"] == "conversation.llm.completed" and not e["data"].get("tool_calls") for e in timeline
    )


def _of(timeline: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in timeline if e["type"] == type_]


def _request_ids(timeline: list[dict[str, Any]], name: str = "task") -> list[str]:
    return [e["id"] for e in _of(timeline, "conversation.tool.requested") if e["data"]["name"] == name]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("subagents")
    home = base / "home"
    home.mkdir()
    root = base / "proj"
    (root / ".jido" / "agents").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Read", "Bash(sleep:*)", "Bash(echo:*)"]}})
    )
    (root / "notes.txt").write_text("the answer is 42\n")
    (root / ".jido" / "agents" / "reader.md").write_text(
        "---\nname: reader\ndescription: Reads files and reports\ntools: read_file, glob\nmodel: inherit\n---\n"
        "You only read files. Report what they say.\n"
    )
    (home / "agents").mkdir()
    (home / "agents" / "shell.md").write_text(
        "---\nname: shell\ndescription: Runs shell commands\ntools: [bash]\n---\nYou run commands.\n"
    )
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    env = {
        "JIDO_CODE_HOME": str(home),
        "JIDO_CONV_SUBAGENTS_MAX_PER_CONVERSATION": "2",
        "JIDO_CONV_SUBAGENTS_MAX_PER_PROJECT": "3",
        "JIDO_CONV_SUBAGENTS_MAX_DEPTH": "1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop))
    router = Router()
    try:
        async with ScriptedLlm(responder=router) as llm:
            await wait_for_services(config, timeout=90)
            bus = await Bus.connect(config, "test")
            try:
                info = await EngineClient(bus).start_project(str(root), timeout=30)
                system = System(bus, info.project_id, root, llm, router)
                await bus.subscribe(subjects.signal_filter(), system.on_signal)
                yield system
            finally:
                await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


async def test_two_children_in_parallel_answer_as_tool_results_and_the_ledger_counts_them(
    system: System,
) -> None:
    r = system.router
    r.add(
        "fan out",
        Reply.tools(
            call("task", description="read notes", prompt="child A: read notes.txt", subagent_type="reader"),
            call("task", description="say hi", prompt="child B: just answer"),
        ),
        Reply.answer("both children answered"),
    )
    # each child's first answer takes a second: run one after the other, the second would start
    # only after the first had finished
    r.add(
        "child A: read notes.txt",
        Reply.tools(call("read_file", path="notes.txt"), delay_s=1.0),
        Reply.answer("A: 42"),
    )
    r.add("child B: just answer", Reply.answer("B: hi", delay_s=1.0))
    await system.ask("fan", "fan out")
    timeline = await system.final("fan")

    results = {e["data"]["call_id"]: e["data"]["data"] for e in _of(timeline, "conversation.tool.completed")}
    assert sorted(results.values()) == ["A: 42", "B: hi"]
    status = (await system.client.get_projection("fan", "subagent_status")).value
    assert sorted(v["status"] for v in status.values()) == ["completed", "completed"]
    assert sorted(v["result"] for v in status.values()) == ["A: 42", "B: hi"]
    assert {v["name"] for v in status.values()} == {"reader", "general-purpose"}
    assert sorted(v["description"] for v in status.values()) == ["read notes", "say hi"]
    # each child is a conversation of its own, with its own journal, referring to its parent
    rids = _request_ids(timeline)
    children = [child_conversation_id("fan", rid) for rid in rids]
    assert sorted(status) == sorted(children)
    started = _of(timeline, "conversation.subagent.started")
    assert len(started) == 2
    # both started before either finished: they ran in parallel
    first_done = min(i for i, e in enumerate(timeline) if e["type"] == "conversation.subagent.completed")
    assert all(timeline.index(s) < first_done for s in started)
    for child in children:
        child_timeline = await system.timeline(child)
        assert child_timeline[0]["type"] == "conversation.user.message"
        info = (await system.client.list(conversation_id=child)).conversations
        assert [c.conversation_id for c in info] == [child]

    # the model of child A was offered only its template's tools, with its template's prompt
    a_requests = [
        b
        for b in system.llm.requests
        if any(m.get("content") == "child A: read notes.txt" for m in b["messages"])
    ]
    assert a_requests and a_requests[0]["messages"][0] == {
        "role": "system",
        "content": "You only read files. Report what they say.",
    }
    assert sorted(t["function"]["name"] for t in a_requests[0]["tools"]) == ["glob", "read_file"]

    # ledger: the children's totals are accounted under the parent
    ledger = LedgerReader(system.bus)
    own = await ledger.conversation(system.project_id, "fan")
    kids = [await ledger.conversation(system.project_id, c) for c in children]
    assert own.calls == 2 and [k.calls for k in kids] in ([2, 1], [1, 2])
    tree = await ledger.with_subagents(system.project_id, "fan")
    expected = combine(system.project_id, [own, *kids])
    assert (tree.calls, tree.total_tokens, tree.prompt_tokens) == (
        expected.calls,
        expected.total_tokens,
        expected.prompt_tokens,
    )
    assert tree.total_tokens > own.total_tokens
    # the project's sum counts each conversation once (children are not counted twice)
    project = await ledger.project(system.project_id)
    assert project.calls >= expected.calls
    per_conversation = [await ledger.conversation(system.project_id, c) for c in ("fan", *children)]
    assert sum(t.calls for t in per_conversation) == expected.calls


async def test_a_template_restricts_the_child_tools_and_a_call_outside_them_is_refused(
    system: System,
) -> None:
    r = system.router
    r.add(
        "restricted",
        Reply.tools(call("task", description="try bash", prompt="child R: run echo", subagent_type="reader")),
        Reply.answer("parent done"),
    )
    r.add(
        "child R: run echo", Reply.tools(call("bash", command="echo hi")), Reply.answer("R: bash is not mine")
    )
    await system.ask("restricted", "restricted")
    timeline = await system.final("restricted")
    [rid] = _request_ids(timeline)
    child = child_conversation_id("restricted", rid)
    child_timeline = await system.timeline(child)
    [refused] = _of(child_timeline, "conversation.tool.failed")
    assert refused["data"]["error_type"] == "unknown_tool"
    assert refused["data"]["details"]["offered"] == ["read_file", "glob"] or sorted(
        refused["data"]["details"]["offered"]
    ) == ["glob", "read_file"]
    assert "bash" in refused["data"]["message"]
    # the refused call never reached the tool runner
    assert not [
        s for s in system.signals if s.type == "tool.started" and s.data.get("conversation_id") == child
    ]
    [done] = _of(timeline, "conversation.tool.completed")
    assert done["data"]["data"] == "R: bash is not mine"


async def test_a_child_that_fails_is_a_tool_error_of_the_parent(system: System) -> None:
    r = system.router
    r.add(
        "failing",
        Reply.tools(call("task", description="will fail", prompt="child F: fail")),
        Reply.answer("the child failed, sorry"),
    )
    r.add("child F: fail", Reply.error(401, "invalid api key"))
    await system.ask("failing", "failing")
    timeline = await system.final("failing")
    [failed] = _of(timeline, "conversation.tool.failed")
    assert failed["data"]["error_type"] == "subagent_failed"
    assert "invalid api key" in failed["data"]["message"] or "401" in failed["data"]["message"]
    [rid] = _request_ids(timeline)
    child = child_conversation_id("failing", rid)
    assert failed["data"]["details"]["subagent_id"] == child
    status = (await system.client.get_projection("failing", "subagent_status")).value
    assert status[child]["status"] == "failed"
    assert _of(timeline, "conversation.assistant.message")[-1]["data"]["text"] == "the child failed, sorry"


async def test_quotas_and_depth_refuse_with_clear_tool_errors(system: System) -> None:
    r = system.router
    # three task calls in one turn, two allowed per conversation; each child tries to nest
    r.add(
        "three",
        Reply.tools(
            *(call("task", description=f"job {n}", prompt=f"child Q{n}: nest") for n in range(3)),
        ),
        Reply.answer("three handled"),
    )
    for n in range(3):
        r.add(
            f"child Q{n}: nest",
            Reply.tools(call("task", description="deeper", prompt="grandchild")),
            Reply.answer(f"Q{n}: no deeper"),
        )
    await system.ask("three", "three")
    timeline = await system.final("three")
    failed = _of(timeline, "conversation.tool.failed")
    assert [f["data"]["error_type"] for f in failed] == ["subagent_quota_exceeded"]
    assert "at most 2 sub-agents may run at once per conversation" in failed[0]["data"]["message"]
    done = _of(timeline, "conversation.tool.completed")
    assert len(done) == 2
    # each child's own task call was refused by the depth limit (1)
    for rid in _request_ids(timeline):
        if rid == failed[0]["data"]["request_id"]:
            continue
        child_timeline = await system.timeline(child_conversation_id("three", rid))
        [deeper] = _of(child_timeline, "conversation.tool.failed")
        assert deeper["data"]["error_type"] == "subagent_depth_exceeded"
        assert "nest 1 deep" in deeper["data"]["message"]

    # the project's limit (3) holds across conversations and replicas: slots held elsewhere count
    slots = await system.bus.kv(subjects.BUCKET_SUBAGENT_SLOTS)
    for n in range(3):
        await slots.put(f"{system.project_id}.{n}", b"someone-else")
    try:
        r.add(
            "crowded", Reply.tools(call("task", description="one more", prompt="never")), Reply.answer("ok")
        )
        await system.ask("crowded", "crowded")
        crowded = await system.final("crowded")
        [refused] = _of(crowded, "conversation.tool.failed")
        assert refused["data"]["error_type"] == "subagent_quota_exceeded"
        assert refused["data"]["details"]["scope"] == "project"
        assert "at most 3 sub-agents may run at once in this project" in refused["data"]["message"]
    finally:
        for n in range(3):
            await slots.delete(f"{system.project_id}.{n}")


async def test_cancel_of_the_parent_cancels_the_child_and_its_bash(system: System) -> None:
    r = system.router
    r.add(
        "cancel me",
        Reply.tools(call("task", description="long job", prompt="child C: sleep", subagent_type="shell")),
    )
    r.add("child C: sleep", Reply.tools(call("bash", command=f"sleep {SLEEP_MARK}")))
    await system.ask("cancelled", "cancel me")
    started = await system.wait_signal(lambda e: e.type == "tool.started" and e.data.get("name") == "bash")
    child = str(started.data["conversation_id"])
    assert child.startswith("cancelled-sa-")
    await _wait_procs(lambda: bool(_procs_with(SLEEP_MARK)))
    await system.wait_timeline("cancelled", lambda t: bool(_of(t, "conversation.subagent.started")))
    running = (await system.client.get_projection("cancelled", "subagent_status")).value
    assert {k: v["status"] for k, v in running.items()} == {child: "running"}
    await system.client.send_event("cancelled", "conversation.cancel", {"reason": "enough"})
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await _wait_procs(lambda: not _procs_with(SLEEP_MARK), timeout=10)
    assert loop.time() - t0 < 1.0, f"the child's bash outlived the cancel by {loop.time() - t0:.2f} s"
    child_timeline = await system.wait_timeline(child, lambda t: bool(_of(t, "conversation.cancel")))
    assert _of(child_timeline, "conversation.cancel")[0]["data"]["reason"] == "the parent was cancelled"
    status = (await system.client.get_projection("cancelled", "subagent_status")).value
    assert status[child]["status"] == "cancelled"
    diagnostics = (await system.client.get_projection("cancelled", "diagnostics")).value
    assert diagnostics["pending_subagents"] == 0 and diagnostics["status"] == "cancelled"


async def test_stopping_the_parent_cancels_its_child(system: System) -> None:
    r = system.router
    r.add("stop me", Reply.tools(call("task", description="slow", prompt="child S: think long")))
    r.add("child S: think long", Reply.answer("never seen", delay_s=30.0))
    await system.ask("stopped", "stop me")
    timeline = await system.wait_timeline("stopped", lambda t: bool(_of(t, "conversation.subagent.started")))
    child = _of(timeline, "conversation.subagent.started")[0]["data"]["subagent_id"]
    await system.client.stop("stopped", reason="done for today")
    child_timeline = await system.wait_timeline(child, lambda t: bool(_of(t, "conversation.cancel")))
    assert _of(child_timeline, "conversation.cancel")[0]["data"]["reason"] == "the parent was cancelled"
    assert not _answered(child_timeline)


def _procs_with(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append(int(pid))
    return found


async def _wait_procs(pred: Callable[[], bool], timeout: float = WAIT) -> None:
    async def poll() -> None:
        while not pred():  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # /proc has no change notification

    await asyncio.wait_for(poll(), timeout)


async def test_a_closing_parent_actor_leaves_its_child_running_and_the_call_run_again_finds_it(
    system: System,
) -> None:
    """A replica letting the parent go (shutdown, hand-over) cuts the call without cancelling the
    child; the replica taking the parent over runs the call again and gets the child's answer."""
    system.router.add("child O: answer later", Reply.answer("O: finished", delay_s=3.0))
    started = asyncio.Event()
    spawned: list[str] = []

    async def deliver(signal: Signal) -> None:
        if signal.type == "conversation.subagent.started":
            started.set()

    def spawn(key: str, coro: Coroutine[Any, Any, None]) -> None:
        spawned.append(key)
        coro.close()

    parent = ParentView(
        project_id=system.project_id,
        conversation_id="closer",
        settings=system.settings,
        offered=["read_file"],
        deliver=deliver,
        spawn=spawn,
        closing=lambda: True,
    )
    intent = RunToolIntent(
        request_id="closer:req1",
        call_id="c1",
        name="task",
        args={"description": "later", "prompt": "child O: answer later"},
        correlation_id="corr",
    )
    asked = len(system.llm.requests)
    cut = asyncio.create_task(SubagentRunner(system.bus, SubagentSettings()).run(parent, intent))
    await asyncio.wait_for(started.wait(), WAIT)
    # the child is asking its model (which takes 3 s, room for a loaded machine to cancel first)
    await system.llm.wait_requests(asked + 1, timeout=WAIT)
    # nats-py's flush swallows a CancelledError that lands in it (a known nats-py behaviour), so
    # the cut is repeated until it takes, as a closing actor's task group would see it end
    for _ in range(20):
        cut.cancel()
        await asyncio.wait({cut}, timeout=1.0)
        if cut.done():
            break
    assert cut.cancelled()
    assert spawned == []  # no cancel sent to the child
    child = child_conversation_id("closer", "closer:req1")
    child_timeline = await system.final(child)
    assert not _of(child_timeline, "conversation.cancel")
    again = await SubagentRunner(system.bus, SubagentSettings()).run(parent, intent)
    assert isinstance(again, ToolCallCompleted) and again.data == "O: finished"
    assert len(_of(await system.timeline(child), "conversation.user.message")) == 1
    # its slot was released at the end
    assert await SubagentSlots(system.bus, limit=3, ttl_s=60).held(system.project_id) == {}
