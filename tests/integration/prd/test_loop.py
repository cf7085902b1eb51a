"""The loop manager through the real prd service (engine + prd on a real nats-server, real git,
checks in the real sandbox) with an instant provider registered by the test: retries, never
passing a story on a failed check, out of retries, pause/resume/stop within one step, one loop
per PRD, parallel PRDs only in separate worktrees. One system for the module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jidocode.services.prd import service as prd_service
from jidocode.services.prd.config import PrdConfig
from jidocode.services.prd.loop import MAX_EVENT_TEXT, LoopManager, LoopSettings
from jidocode.services.prd.providers.base import (
    IterationRequest,
    IterationRun,
    Provider,
    ProviderCapabilities,
)
from jidocode.services.prd.store import LoopRecord, LoopStore, lease_key, loop_key
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.clients._prd import PrdClient
from jidocode.shared.config import Config
from jidocode.shared.errors import Conflict, InvalidInput, NotFound
from jidocode.shared.events.prd import LoopInfo, StoryDraft
from jidocode.shared.lease import Held
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

from .helpers import WAIT, Events, git, git_repo, jsonl, stream_events
from .instant import Act, InstantProvider

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHECK = "test ! -e broken.txt"
MAX_RETRIES = 2


class System:
    def __init__(self, bus: Bus, project_id: str, root: Path, provider: InstantProvider) -> None:
        self.bus = bus
        self.project_id = project_id
        self.root = root
        self.provider = provider
        self.prds = PrdClient(bus, project_id, timeout=30)
        self.events = Events()

    async def create(self, name: str, *titles: str) -> None:
        await self.prds.create(name, title=name, stories=[StoryDraft(title=t) for t in titles])

    def prd_json(self, name: str) -> dict[str, object]:
        return dict(json.loads((self.root / ".daedalus" / "prds" / name / "prd.json").read_text()))

    def stories(self, name: str) -> list[dict[str, object]]:
        return list(self.prd_json(name)["userStories"])  # type: ignore[call-overload]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prdloop")
    home = base / "home"
    home.mkdir()
    (home / "settings.json").write_text(
        json.dumps(
            {
                "prd": {
                    "retry": {"max_retries": MAX_RETRIES, "retry_delays": [0, 0]},
                    "quality_commands": [CHECK],
                    "check_timeout_s": 60,
                }
            }
        )
    )
    root = git_repo(base / "repo")
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = os.environ.get("JIDO_CODE_HOME")
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    provider = InstantProvider()

    def resolve(key: str, project_id: str, cfg: PrdConfig) -> Provider:
        return provider

    stop = asyncio.Event()
    engine = asyncio.create_task(serve_many(config, stop, names=("engine",)))
    prd = asyncio.create_task(
        prd_service.serve(
            config, stop, resolve_provider=resolve, settings=LoopSettings(heartbeat_s=0.5, lease_s=3.0)
        )
    )
    try:
        await wait_for_services(config, timeout=60, names=("engine", "prd"))
        bus = await Bus.connect(config, "test")
        try:
            info = await EngineClient(bus).start_project(str(root), timeout=30)
            system = System(bus, info.project_id, root, provider)
            await system.events.follow(bus, info.project_id)
            yield system
        finally:
            await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(engine, prd), 30)
        server.stop()
        if saved is None:
            os.environ.pop("JIDO_CODE_HOME", None)
        else:
            os.environ["JIDO_CODE_HOME"] = saved


async def test_two_stories_pass_a_failed_check_is_retried_and_the_log_matches_the_stream(
    system: System,
) -> None:
    p = system.provider
    p.scripts["two/US-001"] = [Act(write={"one.txt": "one\n"})]
    p.scripts["two/US-002"] = [
        Act(write={"two.txt": "two\n", "broken.txt": "x"}),  # the check fails
        Act(delete=("broken.txt",)),  # fixed on the retry
    ]
    await system.create("two", "First", "Second")
    info = await system.prds.run("two", worktree=True)
    assert info.state == "running" and info.branch == "prd/two"
    await system.events.wait_state("two", "completed")

    work = Path(info.work_dir)
    log = git(work, "log", "--format=%s", "main..prd/two").splitlines()
    assert log == ["US-002: Second", "US-001: First"]
    committed = git(work, "show", "--name-only", "--format=", "HEAD").splitlines()
    assert [f for f in committed if not f.startswith(".daedalus/")] == ["two.txt"]
    # prd.json and progress.md go into each story's commit: the worktree is clean after the run
    assert {".daedalus/prds/two/prd.json", ".daedalus/prds/two/progress.md"} <= set(committed)
    assert git(work, "status", "--porcelain", "--untracked-files=all") == ""
    assert (
        git(work, "show", "HEAD:.daedalus/prds/two/prd.json")
        == (system.root / ".daedalus" / "prds" / "two" / "prd.json").read_text().strip()
    )
    assert [s["passes"] for s in system.stories("two")] == [True, True]
    assert [s["inProgress"] for s in system.stories("two")] == [False, False]
    assert [s["attempts"] for s in system.stories("two")] == [1, 2]

    reports = system.events.of("two", "prd.quality.report")
    assert [r["ok"] for r in reports] == [True, False, True]
    assert len(system.events.of("two", "prd.retry.scheduled")) == 1
    # the story passed only after the passing report, and was committed only then
    types = [e["type"] for e in system.events.of("two") if e.get("story_id") == "US-002"]
    failed_at = types.index("prd.quality.report")
    assert "prd.git.committed" not in types[:failed_at]
    assert types[-2:] == ["prd.git.committed", "prd.story.state_changed"]

    lines = jsonl(system.root / ".daedalus" / "prds" / "two" / "events.jsonl")
    assert [line["data"]["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert await stream_events(system.bus, system.project_id, "two") == lines

    # the record is saved before and after the final state event: a later `prd run` follows from
    # its seq and must not see this loop's "completed" again (waited for on the record's KV key)
    store = await LoopStore.open(system.bus)
    watcher = await store.kv.watch(loop_key(system.project_id, "two"))
    try:

        async def record_counts_the_last_event() -> None:
            async for entry in watcher:
                if (
                    entry is not None
                    and entry.value
                    and LoopRecord.model_validate_json(entry.value).info.seq == len(lines)
                ):
                    return

        await asyncio.wait_for(record_counts_the_last_event(), WAIT)
    finally:
        await watcher.stop()
    progress = (system.root / ".daedalus" / "prds" / "two" / "progress.md").read_text()
    assert (
        "US-001 First: passed on attempt 1" in progress and "US-002 Second: passed on attempt 2" in progress
    )
    # the retry's prompt carried the failing check
    retry_prompt = [r.prompt for r in p.requests if r.metadata.get("prd") == "two"][-1]
    assert CHECK in retry_prompt and "(attempt 2)" in retry_prompt


async def test_a_story_whose_check_always_fails_never_passes_and_ends_in_error(system: System) -> None:
    system.provider.scripts["bad/US-001"] = [Act(write={"broken.txt": "x"})]
    await system.create("bad", "Never green")
    info = await system.prds.run("bad", worktree=True)
    await system.events.wait_state("bad", "error")
    story = system.stories("bad")[0]
    assert story["passes"] is False and story["inProgress"] is True  # sticky, for a later run
    assert story["attempts"] == MAX_RETRIES + 1
    assert [r["ok"] for r in system.events.of("bad", "prd.quality.report")] == [False] * (MAX_RETRIES + 1)
    assert len(system.events.of("bad", "prd.retry.scheduled")) == MAX_RETRIES
    assert system.events.of("bad", "prd.git.committed") == []
    assert git(Path(info.work_dir), "log", "--format=%s", "main..prd/bad") == ""
    loop = (await system.prds.get("bad")).loop
    assert loop is not None and loop.state == "error" and "out of retries" in loop.error
    stored = await (await LoopStore.open(system.bus)).get(system.project_id, "bad")
    assert stored is not None and f"$ {CHECK}\n(exit 1)" in stored.record.failed_checks  # for a resume
    view = await system.prds.reset_story("bad", "US-001")  # allowed once the loop ended
    assert view.prd["userStories"][0]["inProgress"] is False


async def test_a_huge_provider_text_is_capped_in_its_event(system: System) -> None:
    system.provider.scripts["loud/US-001"] = [Act(write={"loud.txt": "l"}, say="x" * 200_000)]
    await system.create("loud", "Loud")
    await system.prds.run("loud", worktree=True)
    await system.events.wait_state("loud", "completed")
    (text,) = [e["text"] for e in system.events.of("loud", "prd.assistant_text")]
    assert text.startswith("x" * MAX_EVENT_TEXT) and len(text) < MAX_EVENT_TEXT + 100
    assert text.endswith(f"[{200_000 - MAX_EVENT_TEXT} more characters]")


async def test_transient_failures_are_retried_and_fatal_ones_are_not(system: System) -> None:
    p = system.provider
    p.scripts["flaky/US-001"] = [Act(fail="transient"), Act(write={"f.txt": "f"})]
    p.scripts["fatal/US-001"] = [Act(fail="fatal")]
    await system.create("flaky", "Flaky")
    await system.create("fatal", "Refused")
    await system.prds.run("flaky", worktree=True)
    await system.prds.run("fatal", worktree=True)
    await system.events.wait_state("flaky", "completed")
    await system.events.wait_state("fatal", "error")
    assert len(system.events.of("flaky", "prd.retry.scheduled")) == 1
    assert system.events.of("fatal", "prd.retry.scheduled") == []
    errors = system.events.of("fatal", "prd.error")
    assert errors[-1]["kind"] == "fatal" and "not retried" in errors[-1]["message"]


async def test_pause_resume_and_stop_act_within_one_step(system: System) -> None:
    p = system.provider
    p.blocked.clear()
    p.release.clear()
    p.scripts["held/US-001"] = [Act(write={"h.txt": "h"}, block=True)]
    await system.create("held", "Slow one")
    info = await system.prds.run("held", worktree=True)
    await asyncio.wait_for(p.blocked.wait(), WAIT)  # the provider's iteration is in flight

    with pytest.raises(Conflict, match="running"):
        await system.prds.run("held", worktree=True)  # one loop per PRD
    with pytest.raises(Conflict, match="running"):
        await system.prds.reset_story("held", "US-001")
    cancels = p.cancels
    paused = await system.prds.pause("held")
    assert paused.state == "paused" and p.cancels == cancels + 1  # cancelled at once
    assert system.stories("held")[0]["inProgress"] is True
    types = [e["type"] for e in system.events.of("held")]
    assert types[-1] == "prd.loop.state_changed" and "prd.quality.report" not in types
    with pytest.raises(Conflict, match="paused"):
        await system.prds.run("held", worktree=True)

    p.blocked.clear()
    resumed = await system.prds.resume("held")
    assert resumed.state == "running" and resumed.story_id == "US-001"
    await asyncio.wait_for(p.blocked.wait(), WAIT)
    held = [r for r in p.requests if r.metadata.get("prd") == "held"]
    assert [r.metadata["attempt"] for r in held] == ["1", "1"]  # the cut attempt, again
    p.release.set()
    await system.events.wait_state("held", "completed")
    assert git(Path(info.work_dir), "log", "-1", "--format=%s") == "US-001: Slow one"

    # stop: the same, and final
    p.blocked.clear()
    p.release.clear()
    p.scripts["halt/US-001"] = [Act(block=True)]
    await system.create("halt", "Stopped one")
    await system.prds.run("halt", worktree=True)
    await asyncio.wait_for(p.blocked.wait(), WAIT)
    stopped = await system.prds.stop("halt", reason="enough")
    assert stopped.state == "stopped" and stopped.error == "enough"
    with pytest.raises(Conflict, match="stopped"):
        await system.prds.resume("halt")
    states = [(e["from_state"], e["to_state"]) for e in system.events.of("halt", "prd.loop.state_changed")]
    assert states == [("ready", "running"), ("running", "stopped")]


async def test_parallel_prds_only_in_separate_worktrees(system: System) -> None:
    p = system.provider
    p.scripts["left/US-001"] = [Act(write={"left.txt": "l"})]
    p.scripts["right/US-001"] = [Act(write={"right.txt": "r"})]
    await system.create("left", "Left")
    await system.create("right", "Right")
    left, right = await asyncio.gather(
        system.prds.run("left", worktree=True), system.prds.run("right", worktree=True)
    )
    assert left.work_dir != right.work_dir
    await system.events.wait_state("left", "completed")
    await system.events.wait_state("right", "completed")
    for name, info in (("left", left), ("right", right)):
        assert git(Path(info.work_dir), "rev-parse", "--abbrev-ref", "HEAD") == f"prd/{name}"
        assert git(system.root, "log", "--format=%s", f"main..prd/{name}") == f"US-001: {name.title()}"
        committed = git(system.root, "show", "--name-only", "--format=", f"prd/{name}").splitlines()
        assert [f for f in committed if not f.startswith(".daedalus/")] == [f"{name}.txt"]
        assert f".daedalus/prds/{name}/prd.json" in committed  # and no other PRD's files
        assert not any(f.startswith(".daedalus/prds/") and f"/{name}/" not in f for f in committed)

    # in the project's own work dir: one PRD at a time, and only on a clean tree
    p.blocked.clear()
    p.release.clear()
    p.scripts["here/US-001"] = [Act(write={"here.txt": "h"}, block=True)]
    await system.create("here", "Here")
    await system.create("there", "There")
    await system.prds.run("here")
    await asyncio.wait_for(p.blocked.wait(), WAIT)
    with pytest.raises(Conflict, match="worktree"):
        await system.prds.run("there")
    p.release.set()
    await system.events.wait_state("here", "completed")
    assert git(system.root, "log", "-1", "--format=%s") == "US-001: Here"
    # in the project root too, the PRD's files went into the story's commit
    assert (
        git(system.root, "status", "--porcelain", "--", ".daedalus/prds/here", ".daedalus/.gitignore") == ""
    )
    (system.root / "stray.txt").write_text("uncommitted")
    with pytest.raises(Conflict, match=r"stray\.txt"):
        await system.prds.run("there")


async def test_a_pause_asked_of_another_replica_reaches_the_owner(system: System) -> None:
    p = system.provider
    p.blocked.clear()
    p.release.clear()
    p.scripts["remote/US-001"] = [Act(block=True)]
    await system.create("remote", "Remote")
    await system.prds.run("remote", worktree=True)
    await asyncio.wait_for(p.blocked.wait(), WAIT)

    async def root_of(project_id: str) -> Path:
        return system.root

    other = LoopManager(
        system.bus,
        await LoopStore.open(system.bus),
        root_of=root_of,
        resolve_provider=lambda key, project_id, cfg: p,
        settings=LoopSettings(heartbeat_s=0.5, lease_s=3.0),
        owner="prd/another-replica",
    )
    cancels = p.cancels
    paused = await other.pause(system.project_id, "remote")  # written into the record, applied by the owner
    assert paused.state == "paused" and p.cancels == cancels + 1
    stopped = await other.stop(system.project_id, "remote", reason="from elsewhere")  # nobody runs it now
    assert stopped.state == "stopped"
    states = [(e["from_state"], e["to_state"]) for e in system.events.of("remote", "prd.loop.state_changed")]
    assert states[-2:] == [("running", "paused"), ("paused", "stopped")]
    lines = jsonl(system.root / ".daedalus" / "prds" / "remote" / "events.jsonl")
    assert [line["data"]["seq"] for line in lines] == list(range(1, len(lines) + 1))


async def test_an_owner_whose_lease_was_taken_over_leaves_the_loop(system: System) -> None:
    """A replica that stalled past its lease learns at its next renewal that another took it
    over: it cuts the iteration and leaves the loop; once that lease is freed the loop is taken
    over at once and asks the cut attempt again."""
    p = system.provider
    p.blocked.clear()
    p.release.clear()
    p.cancelled.clear()
    p.scripts["stalled/US-001"] = [Act(block=True), Act(block=True)]
    await system.create("stalled", "Stalled")
    await system.prds.run("stalled", worktree=True)
    await asyncio.wait_for(p.blocked.wait(), WAIT)
    p.blocked.clear()

    leases = (await LoopStore.open(system.bus)).leases(3.0)
    key = lease_key(system.project_id, "stalled")
    seen = await leases.read(key)
    assert seen.holder is not None and seen.holder != "prd/another-replica"
    other = await leases.take(key, "prd/another-replica", dataclasses.replace(seen, holder=None))
    assert isinstance(other, Held)
    await asyncio.wait_for(p.cancelled.wait(), WAIT)  # the owner's renewal found it taken
    assert not p.blocked.is_set()
    assert await leases.release(other)  # the other replica lets it go: free after the record
    await asyncio.wait_for(p.blocked.wait(), WAIT)  # taken over again, the attempt asked again
    asked = [r.metadata["attempt"] for r in p.requests if r.metadata["prd"] == "stalled"]
    assert asked == ["1", "1"]
    stopped = await system.prds.stop("stalled")
    assert stopped.state == "stopped"
    states = [(e["from_state"], e["to_state"]) for e in system.events.of("stalled", "prd.loop.state_changed")]
    assert states == [("ready", "running"), ("running", "stopped")]


async def test_bad_requests_are_clear_errors(system: System, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="nope"):
        await system.prds.run("nope")
    await system.create("unrun", "Never run")
    with pytest.raises(NotFound, match="no loop"):
        await system.prds.resume("unrun")
    with pytest.raises(Conflict, match="already exists"):
        await system.create("two", "Again")
    listed = {s.name: s for s in (await system.prds.list()).prds}
    assert listed["two"].state == "completed" and listed["two"].passed == 2
    assert listed["bad"].state == "error" and listed["bad"].passed == 0

    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    info = await EngineClient(system.bus).start_project(str(plain), timeout=30)
    prds = PrdClient(system.bus, info.project_id, timeout=30)
    await prds.create("x", stories=[StoryDraft(title="X")])
    with pytest.raises(InvalidInput, match="not a git repository"):
        await prds.run("x")


async def test_a_branch_named_by_the_prd_is_checked_out_in_the_work_dir(system: System) -> None:
    (system.root / "stray.txt").unlink(missing_ok=True)
    system.provider.scripts["branchy/US-001"] = [Act(write={"branchy.txt": "b"})]
    await system.prds.create(
        "branchy", branch_name="feature/branchy", stories=[StoryDraft(title="On its branch")]
    )
    view = await system.prds.get("branchy")
    assert view.prd["branchName"] == "feature/branchy"
    info = await system.prds.run("branchy")
    assert info.branch == "feature/branchy" and info.work_dir == str(system.root)
    await system.events.wait_state("branchy", "completed")
    assert git(system.root, "rev-parse", "--abbrev-ref", "HEAD") == "feature/branchy"
    assert git(system.root, "log", "-1", "--format=%s") == "US-001: On its branch"
    assert git(system.root, "log", "--format=%s", "main..feature/branchy") == "US-001: On its branch"


class _Abandoning:
    """The test's provider plus ``abandon`` (``providers.base.Abandons``), which it records."""

    def __init__(self, inner: InstantProvider) -> None:
        self.inner = inner
        self.abandoned: list[tuple[str, str]] = []

    def name(self) -> str:
        return self.inner.name()

    def capabilities(self) -> ProviderCapabilities:
        return self.inner.capabilities()

    async def run_iteration(self, request: IterationRequest) -> IterationRun:
        return await self.inner.run_iteration(request)

    async def abandon(self, iteration_id: str, work_dir: str) -> None:
        self.abandoned.append((iteration_id, work_dir))


async def test_a_stop_of_a_loop_whose_owner_died_abandons_its_iteration(system: System) -> None:
    """The replica asked applies the stop to the record itself, and stops what the dead owner's
    iteration may still be doing (decision 0294); a paused loop has nothing left running."""
    await system.create("orphan", "Orphan")
    provider = _Abandoning(system.provider)

    async def root_of(project_id: str) -> Path:
        return system.root

    other = LoopManager(
        system.bus,
        store := await LoopStore.open(system.bus),
        root_of=root_of,
        resolve_provider=lambda key, project_id, cfg: provider,
        settings=LoopSettings(heartbeat_s=0.5, lease_s=3.0),
        owner="prd/another-replica",
    )
    # a project no engine knows: the system's own prd service cannot resume this loop, so only
    # the stop below acts on it
    dead = "01deadownerproject000000000"
    iteration = "01iterationleftrunning0000"
    for prd, state in (("orphan", "paused"), ("orphan", "running")):
        info = LoopInfo(
            project_id=dead,
            prd=prd,
            state=state,
            owner="prd/dead",
            work_dir=str(system.root),
            story_id="US-001",
        )
        current = await store.get(dead, prd)
        record = LoopRecord(info=info, iteration_id=iteration)
        await (store.claim(record) if current is None else store.put(current, record))
        # the dead owner's lease, gone after its last record write (as it expires, or is released)
        lease = await store.leases(3.0).take(lease_key(dead, prd), "prd/dead")
        assert isinstance(lease, Held) and await store.leases(3.0).release(lease)
        stopped = await other.stop(dead, prd, reason="its owner is gone")
        assert stopped.state == "stopped" and stopped.owner == ""
        expected = [(iteration, str(system.root))] if state == "running" else []
        assert provider.abandoned == expected, state
