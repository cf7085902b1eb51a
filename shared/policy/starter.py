"""The permissions a project starts with while no settings say what is allowed (decision 0310).

"No settings" means no layer (the global ``settings.json``, or a project layer
that counts) sets ``permissions.allow``, ``permissions.ask`` or
``permissions.default``; ``deny`` rules and ``additional_directories`` still
apply on top. Once any of those three keys is set, the settings say it all and
nothing here is added (the README's ``"allow": ["Read", …]`` example).

==========  =====================================================================
trusted     ``Read`` allowed (``read_file``, ``list_dir``, ``glob``, ``grep``);
            every other call asks (``default: ask``): edits, commands, skills
untrusted   ``Read`` allowed; everything else denied (``default: deny``), with a
            reason naming ``jidocode projects trust <root>``
==========  =====================================================================

Reads stay inside what the path sandbox allows, trusted or not: the root
(realpath, component-wise), never a hidden or sensitive file, never through a
symlink or ``..`` that leaves it. Untrusted, a read can leak nothing the
project did not already hold; running or changing anything waits for trust,
since trusting a folder is what says its authors are trusted (Claude Code's
dialog says the same).
"""

from __future__ import annotations

from typing import Final

from jidocode.shared.settings import PermissionsSettings

__all__ = ["STARTER_ALLOW", "STARTER_KEYS", "permissions_configured", "starter_permissions"]

#: What the starter allows, trusted or not.
STARTER_ALLOW: Final = ("Read",)
#: The keys whose presence in any layer means the settings say what is allowed.
STARTER_KEYS: Final = frozenset({"allow", "ask", "default"})


def permissions_configured(perms: PermissionsSettings) -> bool:
    """Whether some layer set ``allow``, ``ask`` or ``default`` (pydantic's fields set)."""
    return bool(perms.model_fields_set & STARTER_KEYS)


def starter_permissions(perms: PermissionsSettings, *, trusted: bool) -> PermissionsSettings | None:
    """The starter permissions in place of ``perms`` (its deny rules and directories kept),
    or ``None`` when the settings say what is allowed."""
    if permissions_configured(perms):
        return None
    return perms.model_copy(
        update={"allow": list(STARTER_ALLOW), "ask": [], "default": "ask" if trusted else "deny"}
    )
