"""``checkpoints`` in the user's global settings.json: expiry and the size cap (user layer only).

A project's own settings never change its checkpoints (a hostile project could otherwise turn
off the undo of what happens to it). A section that does not validate, or a file that does not
parse, leaves the defaults in force with expiry off (the safe side: checkpoints are recorded and
none is deleted on a guess) and says so in the log.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jidocode.shared.settings_layer import parse_settings_bytes

__all__ = ["CheckpointSettings", "user_checkpoint_settings"]

log = logging.getLogger("jidocode.tool_runner.checkpoints")


class CheckpointSettings(BaseModel):
    """``checkpoints``: whether turns are checkpointed, how long and how many are kept, the size cap."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    #: Whether old checkpoints are dropped (by age and count); off while the settings have an error.
    expire: bool = True
    max_age_days: float = Field(default=30.0, gt=0.0, le=36500.0)
    max_per_conversation: int = Field(default=100, ge=1, le=100_000)
    #: A file larger than this is left out of a checkpoint (and named in its record).
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1, le=1024 * 1024 * 1024)


def user_checkpoint_settings(jido_home: Path) -> CheckpointSettings:
    """The ``checkpoints`` section of ``<jido_home>/settings.json`` (defaults when absent or bad)."""
    file = jido_home / "settings.json"
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return CheckpointSettings()
    except OSError as exc:
        log.warning("checkpoints: %s cannot be read (%s): the defaults apply, no expiry", file, exc)
        return CheckpointSettings(expire=False)
    parsed, diags = parse_settings_bytes(raw, str(file))
    if parsed is None:
        log.warning("checkpoints: %s does not parse (%s): the defaults apply, no expiry", file, diags[:1])
        return CheckpointSettings(expire=False)
    try:
        return CheckpointSettings.model_validate(parsed.get("checkpoints", {}))
    except ValidationError as exc:
        log.warning("checkpoints: %s: bad checkpoints section (%s): the defaults apply, no expiry", file, exc)
        return CheckpointSettings(expire=False)
