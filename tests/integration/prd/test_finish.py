"""`jidocode prd import` and `prd finish` through the real prd service (engine + prd on a real
nats-server, real git in the real sandbox, an instant provider registered by the test): a
fast-forward with the worktree removed and a push to a local bare repository, a merge commit
after a loop in the project root, and a conflict refused naming the file. One system for the
module; the CLI runs through typer's CliRunner in a worker thread (its own event loop).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from click.testing import Result
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.services.prd import service as prd_service
from jidocode.services.prd.config import PrdConfig
from jidocode.services.prd.loop import LoopSettings
from jidocode.services.prd.providers.base import Provider
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, PrdClient
from jidocode.shared.config import Config
from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services

from .helpers import WAIT, Events, git, git_repo
from .instant import Act, InstantProvider

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass
class System:
    bus: Bus
    root: Path
    base: Path
    prds: PrdClient
    provider: InstantProvider
    events: Events
    env: dict[str, str]

    async def cli(self, *args: str) -> Result:
        """``jidocode <args>`` as a terminal would run it (its own event loop, in a thread)."""
        runner = CliRunner()
        return await asyncio.wait_for(asyncio.to_thread(runner.invoke, app, list(args), env=self.env), WAIT)

    async def run_to_the_end(self, name: str, **options: object) -> str:
        """Run ``name``'s loop until it completed; its branch."""
        info = await self.prds.run(name, **options)  # type: ignore[arg-type]
        await self.events.wait_state(name, "completed")
        return info.branch


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prdfinish")
    home = base / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"prd": {"retry": {"max_retries": 0}}}))
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
    tasks = [
        asyncio.create_task(serve_many(config, stop, names=("engine",))),
        asyncio.create_task(
            prd_service.serve(
                config, stop, resolve_provider=resolve, settings=LoopSettings(heartbeat_s=0.5, lease_s=3.0)
            )
        ),
    ]
    try:
        await wait_for_services(config, timeout=WAIT, names=("engine", "prd"))
        bus = await Bus.connect(config, "test")
        try:
            info = await EngineClient(bus).start_project(str(root), timeout=30)
            events = Events()
            await events.follow(bus, info.project_id)
            env = {"NATS_URL": server.url, "JIDO_CODE_HOME": str(home), "COLUMNS": "200"}
            prds = PrdClient(bus, info.project_id, timeout=60)
            yield System(bus, root, base, prds, provider, events, env)
        finally:
            await bus.close()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        server.stop()
        if saved is None:
            os.environ.pop("JIDO_CODE_HOME", None)
        else:
            os.environ["JIDO_CODE_HOME"] = saved


def _flat(result: Result) -> str:
    return " ".join(result.output.split())


async def test_a_ralph_prd_is_imported_finished_with_a_fast_forward_and_pushed(system: System) -> None:
    ralph = system.base / "ralph.json"
    ralph.write_text(
        json.dumps(
            {
                "project": "Greeting",
                "branchName": "ralph/greet",
                "description": "Say hello",
                "userStories": [
                    {
                        "id": "US-001",
                        "title": "Hello file",
                        "description": "As a user I am greeted",
                        "acceptanceCriteria": ["hello.txt says hello"],
                        "priority": 1,
                        "passes": False,
                        "notes": "",
                    },
                    {"id": "US-000", "title": "Done before", "priority": 2, "passes": True, "notes": "old"},
                ],
            }
        )
    )
    imported = await system.cli("prd", "import", str(system.root), str(ralph))
    assert imported.exit_code == 0, imported.output
    assert "created greet with 2 stories (1 passed)" in _flat(imported)
    stored = json.loads((system.root / ".daedalus/prds/greet/prd.json").read_text())
    assert stored["branchName"] == "ralph/greet" and stored["userStories"][1]["passes"] is True

    system.provider.scripts["greet/US-001"] = [Act(write={"hello.txt": "hello\n"})]
    branch = await system.run_to_the_end("greet", worktree=True)
    assert branch == "ralph/greet"
    remote = system.base / "remote.git"
    git(system.base, "init", "-q", "--bare", str(remote))
    git(system.root, "remote", "add", "origin", str(remote))
    worktree = system.root / ".daedalus/worktrees/greet"
    assert worktree.is_dir()

    finished = await system.cli("prd", "finish", str(system.root), "greet", "--push")
    assert finished.exit_code == 0, finished.output
    tip = git(system.root, "rev-parse", "ralph/greet")
    assert git(system.root, "rev-parse", "main") == tip  # a fast-forward: main is the branch's tip
    out = _flat(finished)
    assert f"main fast-forwarded ralph/greet (now {tip[:12]})" in out and "pushed main to origin" in out
    assert not worktree.exists() and str(worktree) not in git(system.root, "worktree", "list")
    assert (system.root / "hello.txt").read_text() == "hello\n"
    assert git(remote, "rev-parse", "refs/heads/main") == tip
    assert git(system.root, "rev-parse", "refs/remotes/origin/main") == tip
    assert git(system.root, "status", "--porcelain", "--untracked-files=all") == ""  # as Ralph leaves it
    # the PRD's live files in the root were set aside for the merge and put back
    after = json.loads((system.root / ".daedalus/prds/greet/prd.json").read_text())
    assert [s["passes"] for s in after["userStories"]] == [True, True]


async def test_a_root_loop_is_merged_back_with_a_merge_commit(system: System) -> None:
    system.provider.scripts["side/US-001"] = [Act(write={"side.txt": "side\n"})]
    await system.prds.create("side", title="Side", stories=[StoryDraft(title="Side file")])
    branch = await system.run_to_the_end("side", branch="feat/side")
    assert git(system.root, "branch", "--show-current") == "feat/side"
    # meanwhile main moves on
    git(system.root, "switch", "-q", "main")
    (system.root / "main.txt").write_text("main\n")
    git(system.root, "add", "main.txt")
    git(system.root, "commit", "-q", "-m", "main moves on")
    git(system.root, "switch", "-q", branch)

    done = await system.prds.finish("side")
    assert (done.merge, done.branch, done.into, done.worktree_removed) == (
        "merge_commit",
        "feat/side",
        "main",
        "",
    )
    assert git(system.root, "branch", "--show-current") == "main"
    assert git(system.root, "rev-parse", "HEAD") == done.commit
    parents = git(system.root, "log", "-1", "--format=%P").split()
    assert parents[1] == git(system.root, "rev-parse", "feat/side") and len(parents) == 2
    assert git(system.root, "log", "-1", "--format=%s").startswith("Merge PRD side (feat/side): Side")
    assert (system.root / "side.txt").is_file() and (system.root / "main.txt").is_file()


async def test_a_conflict_is_refused_naming_the_file_and_nothing_changes(system: System) -> None:
    system.provider.scripts["clash/US-001"] = [Act(write={"clash.txt": "from the loop\n"})]
    await system.prds.create("clash", title="Clash", stories=[StoryDraft(title="Clash file")])
    await system.run_to_the_end("clash", worktree=True)
    (system.root / "clash.txt").write_text("from main\n")
    git(system.root, "add", "clash.txt")
    git(system.root, "commit", "-q", "-m", "main writes clash.txt too")
    head = git(system.root, "rev-parse", "HEAD")

    with pytest.raises(Conflict) as refused:
        await system.prds.finish("clash")
    assert "merging 'prd/clash' into 'main' conflicts in clash.txt" in refused.value.message
    assert refused.value.details["files"] == ["clash.txt"]
    assert git(system.root, "rev-parse", "HEAD") == head
    assert (system.root / ".daedalus/worktrees/clash").is_dir()
    assert git(system.root, "status", "--porcelain", "--", ".", ":(exclude).daedalus") == ""
