"""Tool commands do not run with JidoCode's own venv first on PATH (issue 13: `./dev up` put
`.venv/bin` first, so the project's `python`, `pip` and `pytest` were JidoCode's)."""

from __future__ import annotations

import os
import sys

from jidocode.services.tool_runner.tools.bash import scrubbed_env
from jidocode.shared.sandbox import sandbox_env
from jidocode.shared.sandbox._env import own_venv_bin


def test_the_venv_jidocode_runs_in_is_known() -> None:
    # the tests run in the project's .venv (./dev test), as the services under ./dev up
    assert sys.prefix != sys.base_prefix
    assert own_venv_bin() == os.path.join(sys.prefix, "bin")


def test_commands_lose_jidocode_venv_but_keep_the_rest_of_path() -> None:
    own = os.path.join(sys.prefix, "bin")
    source = {"PATH": f"{own}:/opt/tools/bin:{own}/:/usr/bin", "HOME": "/home/u"}
    assert sandbox_env(source, home="/h", tmpdir="/t")["PATH"] == "/opt/tools/bin:/usr/bin"
    assert scrubbed_env(source)["PATH"] == "/opt/tools/bin:/usr/bin"  # the bash tool without a sandbox


def test_another_venv_stays() -> None:
    source = {"PATH": "/srv/project/.venv/bin:/usr/bin"}
    env = sandbox_env(source, home="/h", tmpdir="/t", own_bin="/work/jidocode/.venv/bin")
    assert env["PATH"] == "/srv/project/.venv/bin:/usr/bin"
    assert (
        sandbox_env({"PATH": "/v/bin"}, home="/h", tmpdir="/t", own_bin="/v/bin")["PATH"]
        == "/usr/local/bin:/usr/bin:/bin"
    )
