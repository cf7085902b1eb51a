"""The sandbox's pure parts and its bookkeeping: the bubblewrap command line, the choice of sandbox,
the settings it reads (a project never weakens it), the environment, the Landlock read cover, and the
snapshot/repair of protected paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jidocode.shared import sandbox
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.sandbox import Capabilities, Mount, bwrap_argv, choose
from jidocode.shared.settings import SandboxSettings
from tests.security.sandbox_support import CANARY_SECRET, make_project, write_global

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/u"}


def _argv(**kw: object) -> list[str]:
    args: dict[str, object] = {"root": "/home/u/proj", "mounts": [], "env": ENV, **kw}
    return bwrap_argv(["/bin/bash", "-c", "true"], **args)  # type: ignore[arg-type]


def test_bwrap_namespaces_no_network_no_capabilities() -> None:
    argv = _argv()
    assert argv[:2] == ["bwrap", "--unshare-all"]
    assert "--share-net" not in argv
    for flag in ("--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    # nothing of the host is visible but what the mounts bind: the root is an empty tmpfs, read-only
    assert "--ro-bind" not in argv and argv[argv.index("--remount-ro") + 1] == "/"
    assert argv.index("--remount-ro") > argv.index("/home/u/proj")
    assert argv[-4:] == ["--", "/bin/bash", "-c", "true"]
    assert "--share-net" in _argv(network=True)
    assert "--disable-userns" not in _argv(disable_userns=False)


def test_bwrap_mounts_ancestors_first_read_only_last() -> None:
    mounts = [
        Mount("ro", "/home/u/proj/.git/hooks", 7),
        Mount("rw", "/home/u/proj/.git", 6),
        Mount("tmpfs", "/home/u"),
        Mount("hide-file", "/etc/creds"),
    ]
    argv = _argv(mounts=mounts)
    pos: dict[str, int] = {}
    for i, a in enumerate(argv):
        pos.setdefault(a, i)  # where each path is first named
    assert pos["/home/u"] < pos["/home/u/proj"] < pos["/home/u/proj/.git"] < pos["/home/u/proj/.git/hooks"]
    assert argv[pos["/home/u/proj/.git/hooks"] - 2 : pos["/home/u/proj/.git/hooks"]] == ["--ro-bind-fd", "7"]
    assert argv[pos["/home/u/proj/.git"] - 2 : pos["/home/u/proj/.git"]] == ["--bind-fd", "6"]
    assert argv[pos["/etc/creds"] - 2 : pos["/etc/creds"]] == ["--ro-bind", "/dev/null"]
    # the environment is set inside only, with --setenv
    assert argv[argv.index("--setenv") + 1 : argv.index("--setenv") + 3] == ["PATH", "/usr/bin:/bin"]


BWRAP = Capabilities(bwrap="/usr/bin/bwrap", landlock_abi=7)
LANDLOCK_ONLY = Capabilities(bwrap_problem="no bwrap", landlock_abi=7)
NOTHING = Capabilities(bwrap_problem="no bwrap", landlock_problem="no landlock")


@pytest.mark.parametrize(
    ("mode", "caps", "expected"),
    [
        ("auto", BWRAP, "bubblewrap"),
        ("auto", LANDLOCK_ONLY, "landlock"),
        ("auto", NOTHING, "unavailable"),
        ("bubblewrap", LANDLOCK_ONLY, "unavailable"),  # no silent fallback to the weaker one
        ("landlock", BWRAP, "landlock"),
        ("landlock", NOTHING, "unavailable"),
        ("off", NOTHING, "off"),
        ("off", BWRAP, "off"),
    ],
)
def test_choose(mode: str, caps: Capabilities, expected: str) -> None:
    choice = choose(SandboxSettings(mode=mode), caps)  # type: ignore[arg-type]
    assert choice.mode == expected
    assert (
        choice.sandboxed
        is {"bubblewrap": True, "landlock": True, "off": False, "unavailable": None}[expected]
    )
    if expected != "bubblewrap":
        assert choice.hint  # always says how to get the stronger one


def _settings(tmp_path: Path, glob: dict[str, object], project: dict[str, object]) -> SandboxSettings:
    home = tmp_path / "jh"
    write_global(home, glob)
    root = tmp_path / "proj"
    (root / ".jido").mkdir(parents=True, exist_ok=True)
    (root / ".jido" / "settings.json").write_text(json.dumps({"sandbox": project}))
    return sandbox.effective_settings(str(root), jido_home=str(home))


def test_a_project_cannot_turn_the_sandbox_off_or_open_the_network(tmp_path: Path) -> None:
    s = _settings(tmp_path, {}, {"mode": "off", "network": True})
    assert s.mode == "auto" and s.network is False


def test_a_project_can_only_make_it_stricter(tmp_path: Path) -> None:
    assert _settings(tmp_path, {"mode": "landlock"}, {"mode": "bubblewrap"}).mode == "bubblewrap"
    assert _settings(tmp_path / "b", {"mode": "bubblewrap"}, {"mode": "landlock"}).mode == "bubblewrap"
    assert _settings(tmp_path / "c", {"network": True}, {"network": False}).network is False


def test_the_global_layer_turns_it_off_and_opens_the_network(tmp_path: Path) -> None:
    s = _settings(tmp_path, {"mode": "off", "network": True}, {})
    assert s.mode == "off" and s.network is True


async def test_no_sandbox_here_refuses_before_anything_runs(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    with pytest.raises(PermissionDenied) as info:
        await sandbox.prepare(["/bin/sh", "-c", f"touch {root}/ran"], root=str(root), caps=NOTHING)
    assert info.value.details["sandbox"] == "unavailable"
    assert "off" in info.value.details["hint"]
    assert not (root / "ran").exists()


def test_env_keeps_no_secret_and_pins_git() -> None:
    source = {
        "PATH": "/home/u/.cargo/bin:/usr/bin:relative",
        "OPENAI_API_KEY": CANARY_SECRET,
        "NATS_PASSWORD": CANARY_SECRET,
        "LD_PRELOAD": "/evil.so",
        "LANG": "C.UTF-8",
    }
    env = sandbox.sandbox_env(source, home="/home/u", tmpdir="/tmp", hidden=["/home/u"])
    assert CANARY_SECRET not in json.dumps(env) and "LD_PRELOAD" not in env
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8"
    pins = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert pins["core.fsmonitor"] == "false" and pins["core.hooksPath"] == "/dev/null"
    assert pins["protocol.ext.allow"] == "never" and pins["credential.helper"] == ""
    assert {"core.pager", "core.sshCommand", "core.editor", "diff.external"} <= set(pins)
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # no __pycache__ in a protected data dir


def test_read_cover_leaves_out_hidden_paths_and_proc(tmp_path: Path) -> None:
    (tmp_path / "home" / "u" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / "other").mkdir()
    (tmp_path / "usr").mkdir()
    os.symlink("usr", tmp_path / "link")
    cover = sandbox.read_cover([str(tmp_path / "home" / "u")], top=str(tmp_path))
    assert str(tmp_path / "home" / "other") in cover and str(tmp_path / "usr") in cover
    assert not [c for c in cover if c.startswith(str(tmp_path / "home" / "u"))]
    assert str(tmp_path) not in cover and str(tmp_path / "link") not in cover
    assert "/proc" not in sandbox.read_cover([], top="/")


def test_protected_paths_include_the_data_dir() -> None:
    assert "config/jido" in sandbox.protected_rels("config/jido")
    assert {".git/hooks", ".git/config", ".jido_code", ".mcp.json", ".envrc"} <= set(sandbox.protected_rels())
    assert sandbox.protected_rels("..") == sandbox.PROTECTED


def test_repair_puts_back_content_and_removes_what_appeared(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    rels = (".git/config", ".vscode", ".github/workflows", ".envrc")
    before = sandbox.capture(str(root), rels)
    original = (root / ".git" / "config").read_bytes()
    (root / ".git" / "config").write_text("[core]\n\tfsmonitor = ./evil\n")
    (root / ".vscode" / "tasks.json").write_text("evil")
    (root / ".github").mkdir()
    os.symlink(str(tmp_path), root / ".github" / "workflows")
    (root / ".envrc").write_text("evil")
    fixed = sandbox.repair(str(root), before)
    assert set(fixed) == set(rels)
    assert (root / ".git" / "config").read_bytes() == original
    assert (root / ".vscode" / "tasks.json").read_text() == '{"tasks": []}\n'
    assert not (root / ".github" / "workflows").is_symlink() and not (root / ".envrc").exists()
    assert sandbox.repair(str(root), before) == []  # nothing left to do


def test_new_empty_folders_are_no_change_but_a_file_in_one_is(tmp_path: Path) -> None:
    """The asset loader makes ``.jido/{skills,…,state}`` while calls may run: empty folders in a
    protected path run nothing, so the guard neither removes them nor stops a call for them."""
    root = make_project(tmp_path / "proj")
    rels = (".jido", ".claude", ".git/hooks")
    before = sandbox.capture(str(root), rels)
    for folder in (".jido/state", ".jido/skills/a", ".claude/agents", ".git/hooks/sub"):
        (root / folder).mkdir(parents=True)
    assert sandbox.repair(str(root), before) == []
    assert (root / ".jido" / "state").is_dir() and (root / ".claude" / "agents").is_dir()
    (root / ".jido" / "skills" / "a" / "SKILL.md").write_text("planted")
    (root / ".claude" / "agents" / "x.md").write_text("planted")
    (root / ".git" / "hooks" / "sub" / "pre-commit").write_text("planted")
    assert set(sandbox.repair(str(root), before)) == set(rels)
    assert not (root / ".jido" / "skills").exists() and not (root / ".claude").exists()
    assert not (root / ".git" / "hooks" / "sub").exists()


def test_repair_removes_a_link_that_replaced_a_directory_on_the_way(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "hooks").mkdir(parents=True)
    before = sandbox.capture(str(root), (".git/hooks",))
    (root / ".git").rename(root / ".git-moved")
    os.symlink(str(elsewhere), root / ".git")
    sandbox.repair(str(root), before)
    assert not (root / ".git").is_symlink() and (root / ".git" / "hooks").is_dir()
    assert sorted(p.name for p in (elsewhere / "hooks").iterdir()) == []  # nothing written through the link


async def test_overlapping_calls_share_the_first_snapshot(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    guard = sandbox.Guard()
    await guard.enter(str(root), (".envrc",), full=True)
    (root / ".envrc").write_text("planted by the first call")
    await guard.enter(str(root), (".envrc",), full=True)  # the second call sees it, and must not keep it
    assert await guard.leave(str(root)) == [".envrc"]
    (root / ".envrc").write_text("planted again")
    assert await guard.leave(str(root)) == [".envrc"]
    assert not (root / ".envrc").exists()


def test_doctor_shows_the_sandbox_in_force_and_runs_a_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from jidocode.cli.main import app

    caps = sandbox.detect()
    if not (caps.bwrap or caps.landlock_abi):
        pytest.skip("no sandbox can run here")
    home = tmp_path / "jh"
    write_global(home, {"mode": "landlock" if caps.landlock_abi else "bubblewrap"})
    monkeypatch.setenv("JIDO_CODE_HOME", str(home))
    root = make_project(tmp_path / "proj")
    result = CliRunner().invoke(app, ["doctor", "--json", "--project", str(root)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["sandbox"] == ("landlock" if caps.landlock_abi else "bubblewrap")
    assert report["check"] == {"ok": True, "output": "ok"}
    if caps.bwrap and caps.landlock_abi:
        assert "auto" in report["hint"]  # bubblewrap runs here: says how to get it
    write_global(home, {"mode": "bubblewrap"})
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox.detect(refresh=True)
    try:
        refused = CliRunner().invoke(app, ["doctor", "--project", str(root)])
    finally:
        monkeypatch.undo()
        sandbox.detect(refresh=True)
    assert refused.exit_code == 1 and "unavailable" in refused.output


def test_a_repositorys_own_symlink_is_kept_and_followed(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj")
    (root / "ci" / "github").mkdir(parents=True)
    os.symlink("ci/github", root / ".github")
    before = sandbox.capture(str(root), (".github/workflows",))
    assert set(before) == {".github", "ci/github/workflows"}  # the link itself, and where it leads
    (root / "ci" / "github" / "workflows").mkdir()
    (root / "ci" / "github" / "workflows" / "evil.yml").write_text("on: push")
    assert sandbox.repair(str(root), before) == ["ci/github/workflows"]
    assert os.readlink(root / ".github") == "ci/github"  # the user's link stays
    (root / ".github").unlink()
    (root / ".github" / "workflows").mkdir(parents=True)
    assert ".github" in sandbox.repair(str(root), before)
    assert os.readlink(root / ".github") == "ci/github"


def test_public_surface() -> None:
    assert set(sandbox.__all__) == {
        "ENV_ALLOWLIST",
        "GIT_PINS",
        "GUARD",
        "INSTALL_HINT",
        "LAUNCHER",
        "MODE_ENV",
        "NO_PROXY",
        "PROTECTED",
        "TRUNCATION_MARK",
        "Capabilities",
        "Choice",
        "Egress",
        "Guard",
        "Launch",
        "Mount",
        "Namespace",
        "OnChunk",
        "TooLarge",
        "bwrap_argv",
        "cap_text",
        "capture",
        "child_pid",
        "choose",
        "detect",
        "effective_settings",
        "forced_mode",
        "hidden_at",
        "hidden_paths",
        "landlock_abi",
        "prepare",
        "protected_rels",
        "read_cover",
        "repair",
        "run_command",
        "runtime_hidden",
        "sandbox_env",
    }
    assert all(hasattr(sandbox, name) for name in sandbox.__all__)
