"""Hidden paths, projects hidden from each other, and roots that may not be projects (issue 24, finding 7).

One list of hidden paths (JidoCode's data home, the JidoCode home, the credential files the runner
was given) holds for the file tools and for bash in the OS sandbox alike, whatever
``additional_directories`` say. A sandboxed command reads its project, the system's toolchain and
what the settings add: never another project. A root that is, contains or lies in JidoCode's own
data, or that is or contains the user's home, is refused by the engine.

Judged by side effects: canary strings in the hidden files (and the real NATS passwords of the
system's credentials) never appear in a tool's result.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jidocode.shared import sandbox
from jidocode.shared.errors import InvalidInput, JidoError, PermissionDenied
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Effect, Policy, authorize
from tests.security.sandbox_support import MODES, make_project, output, sh, skip_unless, write_global

from .bus_system import SecureSystem, failure, secure_system

TOOL_SERVICES = ("engine", "project", "asset_loader", "tool_runner")
CANARY = "hidden-canary-4c1d9e"
#: Every tool may run: only the hidden list and the OS sandbox stand in the way.
ALLOW_ALL = ["Read", "Edit", "Write", "Bash(./attack.sh)"]


@dataclass
class Layout:
    """A user's home with the JidoCode home in it (``~/.jido_code``, its default), and the data home."""

    tmp: Path
    home: Path
    sys_dir: Path
    data_home: Path
    jido_home: Path

    def canaries(self) -> list[Path]:
        return [
            self.data_home / "gateway" / "token",
            self.data_home / "nats" / "jidocode.conf",
            self.jido_home / "notes.txt",
        ]


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    home = tmp_path / "home"
    jido_home = home / ".jido_code"
    sys_dir = tmp_path / "sys"  # the NATS store and the data home of secure_system
    data_home = sys_dir / "data"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JIDO_CODE_HOME", str(jido_home))
    monkeypatch.setenv("JIDO_DATA_HOME", str(data_home))
    out = Layout(tmp_path, home, sys_dir, data_home, jido_home)
    for path in out.canaries():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{CANARY} {path.name}\n")
    return out


def _global(layout: Layout, mode: str | None = None, *, extra: bool = True) -> None:
    """The user's own settings: every tool allowed; with ``extra``, the home and the data home's
    folder as additional directories (they cover the JidoCode home and the data home)."""
    dirs = ["~", str(layout.sys_dir)] if extra else []
    write_global(
        layout.jido_home,
        {"mode": mode} if mode else {},
        permissions={"allow": ALLOW_ALL, "additional_directories": dirs},
    )


def _secrets(system: SecureSystem) -> list[str]:
    return [CANARY, *system.passwords.values()]


def _leaks(result: ToolResult, secrets: list[str]) -> list[str]:
    """The secrets found in what a call returned (a search's own pattern, echoed back, aside)."""
    dumped = result.model_dump(mode="json")
    if isinstance(dumped.get("data"), dict):
        dumped["data"].pop("pattern", None)
    text = json.dumps(dumped)
    return [s for s in secrets if s in text]


def _unquoted(word: str) -> str:
    """``word`` as the shell will see it, but not written whole in the script (which a search finds)."""
    half = len(word) // 2
    return f"'{word[:half]}''{word[half:]}'"


#: The one command the user allows in the attack tests: what the script does is the sandbox's business.
ATTACK_RULE = "Bash(./attack.sh)"


async def _attack(system: SecureSystem, pid: str, root: Path, script: str, request_id: str) -> ToolResult:
    """Run ``script`` as ``./attack.sh`` in ``root`` (the policy sees only the allowed command)."""
    (root / "attack.sh").write_text("#!/bin/bash\n" + script + "\n")
    (root / "attack.sh").chmod(0o755)
    return await system.run(pid, "bash", {"command": "./attack.sh"}, request_id=request_id, timeout=60)


# -- the file tools and bash share one hidden list ----------------------------------------------------


async def test_file_tools_never_return_the_data_home_or_the_jido_home(layout: Layout) -> None:
    _global(layout)
    root = make_project(layout.tmp / "proj")
    async with secure_system(layout.sys_dir, layout.jido_home, TOOL_SERVICES) as system:
        assert (layout.data_home / "credentials" / "client.json").is_file()  # the real credentials
        pid = await system.start_project(root)
        targets = [layout.data_home / "credentials" / "client.json", *layout.canaries()]
        calls: list[tuple[str, dict[str, Any]]] = [("read_file", {"path": str(t)}) for t in targets]
        calls += [
            ("read_file", {"path": str(layout.jido_home / "settings.json")}),
            ("list_dir", {"path": str(layout.data_home / "credentials")}),
            ("list_dir", {"path": str(layout.jido_home)}),
            ("grep", {"pattern": "password|" + CANARY, "path": str(layout.home)}),
            ("grep", {"pattern": CANARY, "path": str(layout.jido_home)}),
            ("glob", {"pattern": "**/*", "path": str(layout.data_home)}),
            ("glob", {"pattern": "**/*.txt", "path": str(layout.home)}),
            ("grep", {"pattern": CANARY, "path": str(layout.sys_dir), "glob": "*.txt"}),
            ("edit_file", {"path": str(layout.canaries()[0]), "old_string": CANARY, "new_string": "x"}),
            ("write_file", {"path": str(layout.data_home / "credentials" / "new.json"), "content": "x"}),
        ]
        for i, (tool, args) in enumerate(calls):
            result = await system.run(pid, tool, args, request_id=f"ft-{i}")
            assert not _leaks(result, _secrets(system)), (tool, args, result)
            if tool in ("read_file", "list_dir", "edit_file", "write_file"):
                assert failure(result).type == "permission_denied", (tool, args, result)
                assert "no tool may see" in failure(result).message
        # the home itself stays readable where the settings add it (the data home aside)
        (layout.home / "notes.md").write_text("a home note\n")
        ok = await system.run(pid, "read_file", {"path": str(layout.home / "notes.md")}, request_id="ft-home")
        assert ok.ok and "a home note" in str(ok.data["content"]), ok
        assert (layout.data_home / "gateway" / "token").read_text() == f"{CANARY} token\n"
        assert not (layout.data_home / "credentials" / "new.json").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_bash_with_the_same_additional_directories_cannot_read_them(layout: Layout, mode: str) -> None:
    skip_unless(mode)
    _global(layout, mode)
    root = make_project(layout.tmp / "proj")
    async with secure_system(layout.sys_dir, layout.jido_home, TOOL_SERVICES) as system:
        pid = await system.start_project(root)
        files = " ".join(
            str(p) for p in [layout.data_home / "credentials" / "client.json", *layout.canaries()]
        )
        command = (
            f"cat {files}; ls -la {layout.data_home} {layout.data_home}/credentials {layout.jido_home}; "
            f"grep -r -h -e password -e {_unquoted(CANARY)} {layout.home} {layout.jido_home}; "
            f"cat {layout.home}/notes.md; echo done"
        )
        (layout.home / "notes.md").write_text("a home note\n")
        result = await _attack(system, pid, root, command, "bash-1")
        text = output(result)
        assert "done" in text and "a home note" in text  # the home is there, as the settings add it
        assert not _leaks(result, _secrets(system)), text
        await _attack(system, pid, root, f"echo pwned > {layout.canaries()[0]}", "bash-2")
        assert layout.canaries()[0].read_text() == f"{CANARY} token\n"


@pytest.mark.parametrize("mode", MODES)
async def test_a_credential_file_named_in_the_environment_is_hidden_from_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    skip_unless(mode)
    creds = tmp_path / "creds"
    creds.mkdir()
    secret = creds / "service.creds"
    secret.write_text(f"{CANARY}\n")
    monkeypatch.setenv("NATS_CREDS", str(secret))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    jido_home = tmp_path.parent / f"{tmp_path.name}-jh"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    policy = Policy.build(
        str(root), allow=ALLOW_ALL, additional_directories=[str(creds)], jido_home=str(jido_home)
    )
    # one list: the file tools' and the sandbox's
    assert policy.sandbox.hidden == sandbox.runtime_hidden(jido_home=str(jido_home))
    assert str(secret.resolve()) in policy.sandbox.hidden
    decision = authorize(policy, "read_file", {"path": str(secret)})
    assert decision.effect is Effect.DENY and decision.details["sandbox"] == "hidden", decision
    text = output(await sh(policy, f"cat {secret}; ls {creds}; echo done"))
    assert "done" in text and CANARY not in text


# -- projects are hidden from each other ------------------------------------------------------------


@pytest.fixture
def elsewhere() -> Iterator[Path]:
    """A directory outside ``/tmp`` and the home (which bubblewrap always covered), in ``/var/tmp``."""
    if not os.access("/var/tmp", os.W_OK):
        pytest.skip("/var/tmp is not writable here")
    path = Path(tempfile.mkdtemp(prefix="jidocode-hidden-", dir="/var/tmp"))
    try:
        yield path.resolve()
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("place", ["tmp", "var-tmp"])
async def test_bash_in_one_project_cannot_read_another_project(
    layout: Layout, elsewhere: Path, mode: str, place: str
) -> None:
    skip_unless(mode)
    _global(layout, mode, extra=False)
    base = layout.tmp if place == "tmp" else elsewhere
    mine = make_project(base / "mine")
    other = make_project(base / "other")
    (other / ".env").write_text(f"API_TOKEN={CANARY}\n")
    (other / "src" / "main.py").write_text(f"print('{CANARY}')\n")
    async with secure_system(layout.sys_dir, layout.jido_home, TOOL_SERVICES) as system:
        pid = await system.start_project(mine)
        await system.start_project(other)
        command = (
            f"cat {other}/.env {other}/src/main.py; ls {other} {base}; "
            f"grep -r -h {_unquoted(CANARY)} {base} /tmp /var/tmp 2>/dev/null; "
            f"find / -name .env -path '*other*' 2>/dev/null; cat src/main.py; echo done"
        )
        result = await _attack(system, pid, mine, command, "x-1")
        text = output(result)
        assert "done" in text and "print('hello')" in text  # its own project is there
        assert CANARY not in text, text
        # nor can it write there
        await _attack(system, pid, mine, f"echo x > {other}/planted", "x-2")
        assert not (other / "planted").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_common_tools_still_work_in_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    skip_unless(mode)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    jido_home = tmp_path.parent / f"{tmp_path.name}-jh"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    policy = Policy.build(str(root), jido_home=str(jido_home))
    script = (
        "set -e; git add -A && git -c user.email=a@b.c -c user.name=t commit -qm first && "
        "git log --oneline | wc -l | tr -d ' '; git status --short | wc -l | tr -d ' '; "
        "python3 -c 'import json, ssl, sqlite3, hashlib, locale; print(\"py\", json.dumps([1]))'; "
        "python3 src/main.py; grep -c root /etc/passwd >/dev/null && echo passwd; "
        "echo abc | sed s/b/X/ | awk '{print toupper($0)}'; printf 'b\\na\\nb\\n' | sort | uniq | wc -l; "
        'find . -name main.py; tmp=$(mktemp); echo t > "$tmp" && cat "$tmp"; ls /usr/bin/env; '
        "echo done"
    )
    text = output(await sh(policy, script, timeout_s=60))
    lines = text.split()
    assert "done" in lines, text
    assert lines[:2] == ["1", "0"], text  # one commit, clean tree
    for word in ("py", "[1]", "hello", "passwd", "AXC", "2", "./src/main.py", "t", "/usr/bin/env"):
        assert word in lines, (word, text)
    if shutil.which("node"):
        assert output(await sh(policy, "node -e 'console.log(6*7)'")).split() == ["42"]


@pytest.mark.parametrize("mode", MODES)
async def test_an_additional_root_directory_opens_neither_the_home_nor_the_hidden_paths(
    tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """``"/"`` as an additional directory opens the filesystem, read-only, in both sandboxes alike:
    not the home (bubblewrap's empty home covers it, Landlock leaves it out), never the data home."""
    skip_unless(mode)
    home, data_home = tmp_path / "home", tmp_path / "data"
    (home / "private").mkdir(parents=True)
    (home / "private" / "note.txt").write_text(f"{CANARY} home\n")
    (data_home / "credentials").mkdir(parents=True)
    (data_home / "credentials" / "client.json").write_text(f"{CANARY} data\n")
    (elsewhere / "elsewhere.txt").write_text("readable elsewhere\n")  # /tmp is the sandbox's own
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JIDO_DATA_HOME", str(data_home))
    jido_home = tmp_path.parent / f"{tmp_path.name}-jh"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "proj")
    policy = Policy.build(str(root), additional_directories=["/"], jido_home=str(jido_home), home=str(home))
    text = output(
        await sh(
            policy,
            f"cat {elsewhere}/elsewhere.txt; cat {home}/private/note.txt {data_home}/credentials/client.json; "
            f"echo x > {elsewhere}/planted; echo done",
        )
    )
    assert "readable elsewhere" in text and "done" in text
    assert CANARY not in text, text
    assert not (elsewhere / "planted").exists()


# -- roots that may not be projects -------------------------------------------------------------------


def _bad_roots(layout: Layout, jido_home: Path) -> dict[str, tuple[Path, type[JidoError], str]]:
    inside_data = layout.data_home / "proj"
    inside_jido = jido_home / "proj"
    for d in (inside_data, inside_jido):
        d.mkdir(parents=True, exist_ok=True)
    return {
        "contains the data home": (layout.sys_dir, PermissionDenied, "contains JidoCode's data home"),
        "inside the data home": (inside_data, PermissionDenied, "inside JidoCode's data home"),
        "contains the JidoCode home": (jido_home.parent, PermissionDenied, "contains the JidoCode home"),
        "inside the JidoCode home": (inside_jido, PermissionDenied, "inside the JidoCode home"),
        "the home directory": (layout.home, PermissionDenied, "is or contains a home directory"),
        "contains the home directory": (layout.tmp, PermissionDenied, "is or contains a home directory"),
        "the filesystem root": (Path("/"), InvalidInput, "filesystem root"),
    }


async def test_roots_that_are_hold_or_lie_in_runtime_data_or_the_home_are_refused(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    jido_home = layout.tmp / "box" / "jido_home"  # a JidoCode home outside the user's home
    jido_home.mkdir(parents=True)
    monkeypatch.setenv("JIDO_CODE_HOME", str(jido_home))
    async with secure_system(layout.sys_dir, jido_home, ("engine",)) as system:
        for case, (root, error, fragment) in _bad_roots(layout, jido_home).items():
            with pytest.raises(error) as info:
                await system.start_project(root)
            assert fragment in str(info.value), (case, str(info.value))
            assert str(root.resolve()) in str(info.value) or root == Path("/"), (case, str(info.value))


@pytest.mark.parametrize("mode", MODES)
async def test_a_project_inside_the_home_still_works(layout: Layout, mode: str) -> None:
    skip_unless(mode)
    _global(layout, mode, extra=False)
    root = make_project(layout.home / "code" / "app")
    (root / "README.md").write_text("inside the home\n")
    async with secure_system(layout.sys_dir, layout.jido_home, TOOL_SERVICES) as system:
        pid = await system.start_project(root)
        read = await system.run(pid, "read_file", {"path": "README.md"}, request_id="in-1")
        assert read.ok and "inside the home" in str(read.data["content"]), read
        ran = await _attack(system, pid, root, "cat README.md && echo ok > made.txt && ls ~ | wc -l", "in-2")
        assert "inside the home" in output(ran)
        assert (root / "made.txt").read_text() == "ok\n"
        leaked = await _attack(system, pid, root, f"cat {layout.canaries()[0]}; echo done", "in-3")
        assert CANARY not in output(leaked)
