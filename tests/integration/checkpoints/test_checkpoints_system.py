"""Checkpoints end to end (issue 30 points 1, 3): every service, real litellm against the scripted
model, the tool runner's endpoints through the typed client and the ``jidocode checkpoints`` CLI.

One turn edits two files and runs ``bash`` that makes, moves and deletes files; the tool runner
recorded one checkpoint before the turn's first writing call, labelled with the user's message.
The user then changes a file the turn wrote and adds one of their own: the diff names them as
changed since by the user, a restore keeps them, and every other file is back byte for byte.
Without a terminal the CLI restores only with ``--yes``; on a pseudo-terminal it asks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply, call
from jidocode.shared.clients import ToolsClient
from tests.e2e import test_chat
from tests.e2e.test_chat import System, _jidocode
from tests.e2e.test_first_chat import Terminal

#: The whole-system fixtures of ``test_chat`` (every service, the scripted LLM).
system = test_chat.system
llm_server = test_chat.llm_server

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

TIMEOUT = 60.0


def tree_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (a link as ``link:<target>``)."""
    out: dict[str, bytes] = {}
    for base, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            out[rel] = (
                b"link:" + os.fsencode(os.readlink(path)) if os.path.islink(path) else Path(path).read_bytes()
            )
    return out


async def test_a_turn_is_restored_byte_for_byte_and_the_users_changes_are_kept(system: System) -> None:
    project = system.project
    (project / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Read", "Edit", "Bash"]}, "tools": {"approval_timeout_s": 30}})
    )
    (project / "bin.dat").write_bytes(bytes(range(256)) + b"\r\n\0")
    before = tree_of(project)
    system.llm.script(
        Reply.tools(
            call("edit_file", path="src/a.py", old_string="print('a')", new_string="print('A')"),
            call("write_file", path="src/new.py", content="new\n"),
        ),
        Reply.tools(
            call(
                "bash",
                command="printf made > made.txt && mkdir -p gen && echo x > gen/x && "
                "mv src/b.py src/moved.py && rm README.md bin.dat",
            )
        ),
        Reply.answer("Changed."),
    )
    client = await system.client()
    assert await client.send_message("change  the\nfiles", timeout=TIMEOUT) == "Changed."
    assert (project / "made.txt").exists() and not (project / "README.md").exists()
    tools = ToolsClient(system.bus, client.project_id, timeout=TIMEOUT)
    listed = (await tools.checkpoints_list(client.conversation_id)).checkpoints
    assert len(listed) == 1, listed  # one per turn, however many writing calls it made
    checkpoint = listed[0]
    message_ids = [e["id"] for e in await client.get_timeline() if e["type"] == "conversation.user.message"]
    assert checkpoint.turn_id == message_ids[0] and checkpoint.label == "change the files"

    (project / "src" / "a.py").write_text("print('mine')\n")  # the user, after the turn
    (project / "notes.txt").write_text("mine too\n")
    diff = await tools.checkpoints_diff(checkpoint.id)
    assert diff.added == ["README.md", "bin.dat", "src/b.py"]
    assert diff.modified == ["src/a.py"]
    assert diff.deleted == ["gen/x", "made.txt", "notes.txt", "src/moved.py", "src/new.py"]
    assert diff.changed_by_user == ["notes.txt", "src/a.py"]

    code, out, err = await _jidocode(system, "checkpoints", "list", str(project))
    assert code == 0, err
    assert checkpoint.id in out and "change the files" in out
    code, out, err = await _jidocode(
        system, "checkpoints", "restore", str(project), checkpoint.id, "--yes", "--json"
    )
    assert code == 0, err
    restored = json.loads(out)
    assert restored["kept"] == ["notes.txt", "src/a.py"]
    assert tree_of(project) == {
        **{k: v for k, v in before.items() if k != "src/a.py"},
        "src/a.py": b"print('mine')\n",
        "notes.txt": b"mine too\n",
    }
    assert not (project / "gen").exists()  # emptied by the restore: gone with its files

    # without a terminal and without --yes, the CLI shows the diff and restores nothing
    (project / "src" / "b.py").unlink()
    code, out, err = await _jidocode(system, "checkpoints", "restore", str(project), checkpoint.id)
    assert code == 2 and "+ src/b.py" in out and "pass --yes" in err
    assert not (project / "src" / "b.py").exists()

    # on a terminal it asks, and a yes restores (the user deleted b.py: only when told to overwrite)
    env = {**os.environ, "NATS_URL": system.config.nats_url, "COLUMNS": "200"}
    command = ["checkpoints", "restore", str(project), checkpoint.id, "--overwrite-user-changes"]
    term = Terminal([sys.executable, "-m", "jidocode.cli.main", *command], env)
    at = await term.expect("+ src/b.py  (changed since by the user)")
    await term.expect("restore these files? [y/N]:", after=at)
    term.type("y")
    assert await term.close() == 0, term.screen
    assert (project / "src" / "b.py").read_bytes() == before["src/b.py"]
    await client.close()
