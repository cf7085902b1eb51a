"""One provider contract suite, every provider passes it (seed 004 "Contract").

- ``jidocode`` runs against a real system (every service in this process, one for the module)
  and the scripted model server (real litellm): the model writes a file with ``write_file`` and
  says it is done;
- ``codex``, ``claude``, ``gemini`` run through the real sandbox against a fake CLI: a small
  Python script that replays the provider's golden session to stdout (configured as
  ``providers.<key>.command``, its golden file as its first argument), placed under ``tmp_path``
  and made visible to the sandbox through ``additional_directories`` (the sandbox hides ``/tmp``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.prd.config import ProviderSettings
from jidocode.services.prd.providers.base import (
    IterationRequest,
    IterationResult,
    Provider,
    ProviderContext,
    ProviderError,
    ProviderEvent,
)
from jidocode.services.prd.providers.registry import ProviderRegistry
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import InvalidInput
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.security.sandbox_support import skip_unless

pytestmark = pytest.mark.asyncio(loop_scope="module")

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "prd"
CLI_KEYS = ("codex", "claude", "gemini")
KEYS = ("jidocode", *CLI_KEYS)
#: Bound of every wait (a loaded machine), never a sleep.
WAIT = 60.0
#: How long the model takes to answer a turn the cancel test cancels first (ample for a loaded
#: machine; shorter keeps the scripted server's shutdown from waiting on it).
HOLD_S = 4.0
FAKE_PYTHON = "/usr/bin/python3"
FAKE_CLI = """#!{python}
import json, os, subprocess, sys, time
golden = sys.argv[1]
stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
with open("received.json", "w") as f:
    json.dump({{"argv": sys.argv[2:], "stdin": stdin, "env": dict(os.environ)}}, f)
if os.environ.get("FAKE_CHILD"):
    # a grandchild in a session of its own: it must end with the run all the same
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", golden], start_new_session=True)
if os.environ.get("FAKE_STDERR"):
    sys.stderr.write("e" * int(os.environ["FAKE_STDERR"]) + "THE-END")
    sys.stderr.flush()
if os.environ.get("FAKE_BIG"):
    print("x" * int(os.environ["FAKE_BIG"]), flush=True)
lines = open(golden).read().splitlines()
hold = float(os.environ.get("FAKE_HOLD", "0"))
for line in lines[:2] if hold else lines:
    print(line, flush=True)
if hold:
    time.sleep(hold)
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


class Router:
    """The scripted model's answers, keyed on the conversation's first user message."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Reply]] = {}

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
        return script[turn] if turn < len(script) else Reply.error(500, "script exhausted")


@dataclass
class System:
    bus: Bus
    home: Path
    base: Path
    llm: ScriptedLlm
    router: Router
    settings: dict[str, Any] = field(default_factory=dict)
    projects: int = 0

    def project(self, allow: list[str], ask: tuple[str, ...] = ()) -> Path:
        self.projects += 1
        root = self.base / f"p{self.projects}"
        (root / ".jido").mkdir(parents=True)
        (root / ".jido" / "settings.json").write_text(
            json.dumps({"permissions": {"allow": allow, "ask": list(ask)}, "llm": self.settings})
        )
        trust_project(root, home=self.home)
        return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prd_providers")
    home = base / "home"
    home.mkdir()
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = os.environ.get("JIDO_CODE_HOME")
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop))
    router = Router()
    try:
        async with ScriptedLlm(responder=router) as llm:
            await wait_for_services(config, timeout=90)
            bus = await Bus.connect(config, "test")
            try:
                settings = {"model": "openai/scripted", "api_base": llm.api_base, "max_retries": 0}
                yield System(bus, home, base, llm, router, settings)
            finally:
                await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        server.stop()
        if saved is None:
            os.environ.pop("JIDO_CODE_HOME", None)
        else:
            os.environ["JIDO_CODE_HOME"] = saved


@dataclass
class Harness:
    """How the suite drives one provider."""

    key: str
    make: Callable[..., Provider]
    request: Callable[[str], IterationRequest]
    #: Whether the work was done (the file written, the fake CLI called with the prompt).
    check_done: Callable[[IterationRequest], None]
    #: The processes of a run still alive (CLI providers).
    leftovers: Callable[[], list[int]] = lambda: []
    #: Prepare a run that only ends when cancelled.
    hold: Callable[[str], Awaitable[None]] | None = None


def _cli_harness(key: str, tmp_path: Path) -> Harness:
    if not os.path.exists(FAKE_PYTHON):
        pytest.skip(f"no {FAKE_PYTHON} for the fake CLI (the sandbox hides the home's interpreters)")
    bin_dir = tmp_path / f"fakebin-{key}"
    bin_dir.mkdir()
    fake = bin_dir / key
    fake.write_text(FAKE_CLI.format(python=FAKE_PYTHON))
    fake.chmod(0o755)
    golden = bin_dir / "session.jsonl"
    shutil.copy(GOLDEN / key / "session.jsonl", golden)
    work = tmp_path / f"work-{key}"
    work.mkdir()
    context = ProviderContext(additional_directories=(str(bin_dir),))

    def make(**settings: Any) -> Provider:
        merged = {"command": str(fake), "args": [str(golden)], "timeout_s": WAIT, **settings}
        return ProviderRegistry({key: ProviderSettings(**merged)}).resolve(key, context)

    def request(prompt: str) -> IterationRequest:
        return IterationRequest(work_dir=str(work), prompt=prompt, model="m-1")

    def check_done(req: IterationRequest) -> None:
        received = json.loads((work / "received.json").read_text())
        assert req.prompt == received["stdin"] or req.prompt in received["argv"]
        assert "m-1" in received["argv"]

    def leftovers() -> list[int]:
        marker = str(golden).encode()
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker in f.read():
                        found.append(int(pid))
            except OSError:
                continue
        return found

    return Harness(key, make, request, check_done, leftovers)


def _jidocode_harness(system: System) -> Harness:
    context = ProviderContext(bus=system.bus)
    roots: dict[str, Path] = {}

    def make(**settings: Any) -> Provider:
        return ProviderRegistry({"jidocode": ProviderSettings(timeout_s=WAIT, **settings)}).resolve(
            "jidocode", context
        )

    def request(prompt: str) -> IterationRequest:
        root = roots.get(prompt) or system.project(["Write"])
        roots[prompt] = root
        system.router.scripts.setdefault(
            prompt,
            [
                Reply.tools(call("write_file", path="story.txt", content=f"done: {prompt}\n")),
                Reply.answer("Wrote story.txt."),
            ],
        )
        return IterationRequest(work_dir=str(root), prompt=prompt)

    def check_done(req: IterationRequest) -> None:
        assert (Path(req.work_dir) / "story.txt").read_text() == f"done: {req.prompt}\n"

    async def hold(prompt: str) -> None:
        system.router.scripts[prompt] = [Reply.answer("too late", delay_s=HOLD_S)]

    return Harness("jidocode", make, request, check_done, hold=hold)


@pytest.fixture(params=KEYS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    key = request.param
    if key == "jidocode":
        return _jidocode_harness(request.getfixturevalue("system"))
    return _cli_harness(key, tmp_path)


async def _run(provider: Provider, req: IterationRequest) -> tuple[list[ProviderEvent], IterationResult]:
    run = await provider.run_iteration(req)

    async def collect() -> list[ProviderEvent]:
        return [ev async for ev in run.events()]

    events = await asyncio.wait_for(collect(), WAIT)
    return events, await asyncio.wait_for(run.result(), WAIT)


def _assert_order(events: list[ProviderEvent]) -> None:
    kinds = [e.kind for e in events]
    assert kinds[0] == "iteration_started", kinds
    assert kinds[-1] in ("iteration_finished", "error"), kinds
    assert sum(k in ("iteration_finished", "error", "iteration_started") for k in kinds) == 2, kinds
    open_calls: set[str] = set()
    for ev in events:
        if ev.kind == "tool_started" and ev.call_id:
            assert ev.call_id not in open_calls
            open_calls.add(ev.call_id)
        if ev.kind == "tool_finished":
            assert ev.call_id in open_calls, f"{ev.call_id} finished before it started"
            open_calls.discard(ev.call_id)
    assert not open_calls, f"tool calls never finished: {open_calls}"


async def test_name_matches_the_key_and_capabilities_are_valid(harness: Harness) -> None:
    provider = harness.make()
    assert provider.name() == harness.key
    caps = provider.capabilities()
    assert caps.streaming and caps.tool_calls
    assert caps.approval_modes and "never" in caps.approval_modes
    assert caps.max_context_hint is None or caps.max_context_hint > 0


async def test_a_run_streams_events_in_contract_order_then_gives_its_result(harness: Harness) -> None:
    req = harness.request(f"contract run of {harness.key}")
    events, result = await _run(harness.make(), req)
    _assert_order(events)
    assert events[-1].kind == "iteration_finished", events[-1]
    assert result.ok and result.failure is None, result
    assert result.summary
    assert any(e.kind == "assistant_text" for e in events)
    assert any(e.kind == "tool_started" for e in events) and any(e.kind == "tool_finished" for e in events)
    harness.check_done(req)
    assert harness.leftovers() == []


async def test_cancel_ends_the_run_as_cancelled_and_leaves_no_process(harness: Harness) -> None:
    prompt = f"contract cancel of {harness.key}"
    if harness.hold is not None:
        await harness.hold(prompt)
        provider = harness.make()
    else:
        provider = harness.make(env={"FAKE_HOLD": "120", "FAKE_CHILD": "1"})
    run = await provider.run_iteration(harness.request(prompt))
    events = run.events()
    first = await asyncio.wait_for(anext(events), WAIT)
    assert first.kind == "iteration_started"
    await asyncio.wait_for(run.cancel(), WAIT)
    await asyncio.wait_for(run.cancel(), WAIT)  # idempotent
    rest = await asyncio.wait_for(_drain(events), WAIT)
    result = await asyncio.wait_for(run.result(), WAIT)
    assert result.ok is False and result.failure == "cancelled", result
    assert rest and rest[-1].kind == "error" and rest[-1].metadata.get("failure") == "cancelled"
    _assert_order([first, *rest])
    assert harness.leftovers() == []


async def _drain(events: AsyncIterator[ProviderEvent]) -> list[ProviderEvent]:
    return [ev async for ev in events]


async def test_result_alone_waits_for_the_end_without_reading_the_events(harness: Harness) -> None:
    req = harness.request(f"contract result-only of {harness.key}")
    run = await harness.make().run_iteration(req)
    result = await asyncio.wait_for(run.result(), WAIT)
    assert result.ok, result


@pytest.mark.parametrize("key", CLI_KEYS)
async def test_a_missing_cli_is_a_config_failure_naming_the_setting(key: str, tmp_path: Path) -> None:
    for command in (str(tmp_path / "nowhere" / key), f"{key}-not-installed-here"):
        provider = ProviderRegistry({key: {"command": command}}).resolve(key, ProviderContext())
        with pytest.raises(ProviderError) as caught:
            await provider.run_iteration(IterationRequest(work_dir=str(tmp_path), prompt="p"))
        assert caught.value.kind == "config"
        assert f"providers.{key}.command" in caught.value.message


@pytest.mark.parametrize("key", CLI_KEYS)
async def test_a_cli_exiting_with_an_error_status_is_a_transient_failure(key: str, tmp_path: Path) -> None:
    harness = _cli_harness(key, tmp_path)
    provider = harness.make(env={"FAKE_EXIT": "3", "FAKE_HOLD": "0.01"})
    events, result = await _run(provider, harness.request("exits 3"))
    _assert_order(events)
    assert result.failure == "transient" and "status 3" in result.error, result


# -- the CLI runner's limits (one flavor is enough: the runner is shared) ------------------------------


async def test_a_cli_runs_in_the_sandbox_with_its_env_and_the_prompt_as_one_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRD_TEST_SECRET", "must-not-leak")
    harness = _cli_harness("gemini", tmp_path)
    prompt = 'add greet(); then run `rm -rf /` ; $(whoami) "quoted"'
    _, result = await _run(harness.make(env={"PROVIDER_TOKEN": "t0k"}), harness.request(prompt))
    assert result.ok, result
    assert result.metadata["sandbox"] in ("bubblewrap", "landlock"), result.metadata
    received = json.loads((tmp_path / "work-gemini" / "received.json").read_text())
    assert received["argv"][-2:] == ["-p", prompt]  # one argv item, never a shell line
    assert received["env"]["PROVIDER_TOKEN"] == "t0k"
    assert "NATS_URL" not in received["env"]  # the sandbox's scrubbed environment
    assert "PRD_TEST_SECRET" not in received["env"]


async def test_a_timeout_kills_the_whole_process_tree(tmp_path: Path) -> None:
    harness = _cli_harness("codex", tmp_path)
    provider = harness.make(timeout_s=0.5, env={"FAKE_HOLD": "120", "FAKE_CHILD": "1"})
    events, result = await _run(provider, harness.request("slow"))
    _assert_order(events)
    assert result.failure == "transient" and "timed out after 0.5 s" in result.error, result
    assert harness.leftovers() == []


async def test_an_oversized_line_is_skipped_and_counted(tmp_path: Path) -> None:
    harness = _cli_harness("claude", tmp_path)
    events, result = await _run(harness.make(env={"FAKE_BIG": str(3 * 1024 * 1024)}), harness.request("big"))
    assert result.ok, result
    assert result.metadata["oversized_lines"] == "1"
    assert events[-1].kind == "iteration_finished"


async def test_too_many_lines_end_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jidocode.services.prd.providers import cli_stream

    monkeypatch.setattr(cli_stream, "MAX_LINES", 3)
    harness = _cli_harness("codex", tmp_path)
    events, result = await _run(harness.make(), harness.request("chatty"))
    _assert_order(events)
    assert result.failure == "fatal" and "more than 3 lines" in result.error, result


async def test_stderr_is_capped_and_quoted_in_the_error(tmp_path: Path) -> None:
    harness = _cli_harness("codex", tmp_path)
    provider = harness.make(env={"FAKE_STDERR": str(300 * 1024), "FAKE_EXIT": "2", "FAKE_HOLD": "0.01"})
    _, result = await _run(provider, harness.request("noisy"))
    assert result.failure == "transient" and result.error.endswith("THE-END"), result.error[-80:]
    assert len(result.error) < 3_000


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"command": "codex=evil"}, "providers.codex.command"),
        ({"env": {"1BAD": "x"}}, "providers.codex.env"),
        ({"timeout_s": -1}, "providers.codex.timeout_s"),
        ({"colour": "blue"}, "providers.codex.colour"),
    ],
)
async def test_a_broken_cli_configuration_names_the_field(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        ProviderRegistry({"codex": settings}).resolve("codex", ProviderContext())
    assert field in caught.value.message, caught.value.message


# -- the jidocode provider's own behaviour (same system) --------------------------------------------


async def _jidocode_run(
    system: System,
    prompt: str,
    replies: list[Reply],
    allow: list[str],
    *,
    ask: tuple[str, ...] = (),
    **request: Any,
) -> tuple[list[ProviderEvent], IterationResult]:
    root = system.project(allow, ask)
    system.router.scripts[prompt] = replies
    provider = ProviderRegistry({"jidocode": {"timeout_s": WAIT}}).resolve(
        "jidocode", ProviderContext(bus=system.bus)
    )
    return await _run(provider, IterationRequest(work_dir=str(root), prompt=prompt, **request))


async def test_jidocode_bash_output_is_command_output(system: System) -> None:
    events, result = await _jidocode_run(
        system,
        "run echo",
        [Reply.tools(call("bash", command="echo provider-says-hi")), Reply.answer("echoed")],
        ["Bash(echo:*)"],
    )
    _assert_order(events)
    outputs = [e for e in events if e.kind == "command_output"]
    assert len(outputs) == 1 and outputs[0].command == "echo provider-says-hi"
    assert "provider-says-hi" in outputs[0].text and outputs[0].exit_code == 0
    assert result.ok and result.summary == "echoed"
    assert result.usage.get("total_tokens", 0) > 0


async def test_jidocode_denies_approvals_when_nobody_watches(system: System) -> None:
    events, result = await _jidocode_run(
        system,
        "needs approval",
        [Reply.tools(call("bash", command="touch made-by-bash")), Reply.answer("could not")],
        [],
        ask=("Bash",),
    )
    _assert_order(events)
    finished = [e for e in events if e.kind == "tool_finished"]
    assert len(finished) == 1 and finished[0].ok is False, events
    assert (
        result.ok and result.metadata["approvals_denied"] == "1" and result.metadata["denied_tools"] == "bash"
    )


async def test_jidocode_leaves_approvals_to_a_human_on_request(system: System) -> None:
    root = system.project([], ("Bash",))
    prompt = "ask a human"
    system.router.scripts[prompt] = [
        Reply.tools(call("bash", command="echo approved-run")),
        Reply.answer("ran"),
    ]
    provider = ProviderRegistry({"jidocode": {"timeout_s": WAIT}}).resolve(
        "jidocode", ProviderContext(bus=system.bus)
    )
    run = await provider.run_iteration(
        IterationRequest(work_dir=str(root), prompt=prompt, approval_policy="on-request")
    )
    seen: list[ProviderEvent] = []
    async for ev in run.events():
        seen.append(ev)
        if ev.metadata.get("approval") == "pending":
            # the human: answers through the conversation like the console does
            from jidocode.shared.clients import ConversationsClient, EngineClient
            from jidocode.shared.events.conversation import ApprovalResponse

            project = await EngineClient(system.bus).start_project(str(root))
            answer = ApprovalResponse(request_id=ev.metadata["request_id"], decision="approve_once")
            conversation_id = run.conversation_id  # type: ignore[attr-defined]
            await ConversationsClient(system.bus, project.project_id).send_event(
                conversation_id, answer.type, answer.to_data()
            )
    result = await asyncio.wait_for(run.result(), WAIT)
    assert result.ok, result
    assert any(e.kind == "command_output" and "approved-run" in e.text for e in seen)
    assert result.metadata["approvals_pending"] == "1"


@pytest.mark.parametrize(("status", "failure"), [(401, "config"), (429, "transient")])
async def test_jidocode_model_failures_are_typed(system: System, status: int, failure: str) -> None:
    events, result = await _jidocode_run(system, f"fails {status}", [Reply.error(status)], ["Write"])
    _assert_order(events)
    assert events[-1].kind == "error" and events[-1].metadata["failure"] == failure
    assert result.ok is False and result.failure == failure, result


async def test_jidocode_refuses_what_it_cannot_do(system: System) -> None:
    provider = ProviderRegistry().resolve("jidocode", ProviderContext(bus=system.bus))
    with pytest.raises(ProviderError) as caught:
        await provider.run_iteration(IterationRequest(work_dir="/", prompt="p", approval_policy="untrusted"))
    assert caught.value.kind == "config" and "untrusted" in caught.value.message
    with pytest.raises(InvalidInput) as missing:
        ProviderRegistry().resolve("jidocode", ProviderContext())
    assert "bus" in missing.value.message


async def test_a_cli_hidden_by_the_sandbox_is_a_config_failure_until_its_dir_is_allowed(
    tmp_path: Path, jido_home: Path
) -> None:
    """The fake CLI lies under /tmp, which neither sandbox shows (bubblewrap's is private, Landlock
    reads only the toolchain directories): without an additional directory the CLI cannot start
    (``config``); the user's global ``additional_directories`` fix it."""
    harness = _cli_harness("claude", tmp_path)
    bin_dir = tmp_path / "fakebin-claude"
    settings = {
        "command": str(bin_dir / "claude"),
        "args": [str(bin_dir / "session.jsonl")],
        "timeout_s": WAIT,
    }
    bare = ProviderRegistry({"claude": settings}).resolve("claude", ProviderContext(jido_home=str(jido_home)))
    _, hidden = await _run(bare, harness.request("hidden"))
    assert hidden.failure == "config" and "providers.claude.command" in hidden.error, hidden
    (jido_home / "settings.json").write_text(
        json.dumps({"permissions": {"additional_directories": [str(bin_dir)]}})
    )
    events, result = await _run(bare, harness.request("visible"))
    assert result.ok, result
    _assert_order(events)


@pytest.mark.parametrize("mode", ["bubblewrap", "landlock"])
async def test_cancel_ends_the_cli_tree_under_either_sandbox(
    tmp_path: Path, jido_home: Path, mode: str
) -> None:
    skip_unless(mode)
    (jido_home / "settings.json").write_text(json.dumps({"sandbox": {"mode": mode}}))
    harness = _cli_harness("claude", tmp_path)
    bin_dir = tmp_path / "fakebin-claude"
    settings = {
        "command": str(bin_dir / "claude"),
        "args": [str(bin_dir / "session.jsonl")],
        "env": {"FAKE_HOLD": "120", "FAKE_CHILD": "1"},
    }
    context = ProviderContext(jido_home=str(jido_home), additional_directories=(str(bin_dir),))
    provider = ProviderRegistry({"claude": settings}).resolve("claude", context)
    run = await provider.run_iteration(harness.request("cancel me"))
    events = run.events()
    assert (await asyncio.wait_for(anext(events), WAIT)).kind == "iteration_started"
    # the fake has written its first lines: it runs (and its grandchild was started before them)
    assert (await asyncio.wait_for(anext(events), WAIT)).kind == "assistant_text"
    await asyncio.wait_for(run.cancel(), WAIT)
    result = await asyncio.wait_for(run.result(), WAIT)
    assert result.failure == "cancelled" and result.metadata["sandbox"] == mode, result
    assert harness.leftovers() == []
