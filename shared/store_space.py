"""How much of its disk the embedded JetStream store's streams may reserve (issue 31, decision 0323).

nats-server grants stream reservations (``max_bytes``) up to 75 % of the free
space of its store's disk, measured when it starts, and refuses the rest
(JetStream error 10047). Fixed sizes (1 + 8 GiB for the conversation streams,
1 GiB for the PRD stream) left ``up`` never ready on a disk with less than
about 13.4 GiB free. So the streams of the embedded store are sized from the
disk's free space when the store is created:

===================  =========================  ================================
stream               share of the free space    at most (the former fixed size)
===================  =========================  ================================
``JIDO_CONV_IN``     5 %                        1 GiB
``JIDO_EVENTS``      25 %                       8 GiB
``JIDO_PRD``         5 %                        1 GiB
===================  =========================  ================================

The server's own limit is pinned to 75 % of that same free space
(:attr:`StreamBudget.server_max_bytes`, its ``max_file_store``). 35 % in all, well under the server's 75 %: a disk with 2 GiB free gives 102 +
512 + 102 MiB. The sizes are written once to ``<store>/stream-budget.json`` and
read back on every later start, so a stream keeps its size while its own data
fills the disk (sizing again each start would shrink it, and nats-server refuses
to resize a stream once the disk is fuller). ``up`` hands them to its services
as the environment variables of :data:`ENV`; a variable the user set wins.
The journal has no size (decision 0033): it reserves nothing.

Pure but for :func:`measure` and :func:`stream_budget` (the file and
``statvfs``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "BUDGET_FILE",
    "ENV",
    "FULL_BELOW",
    "SERVER_SHARE",
    "STORE_ENV",
    "StreamBudget",
    "budget_env",
    "describe_streams",
    "format_bytes",
    "full_store",
    "measure",
    "refusal",
    "size_streams",
    "sizes_in_effect",
    "stream_budget",
    "stream_use",
]

GIB: Final = 1024**3
MIB: Final = 1024**2

#: Stream → (share of the free space, at most).
SHARES: Final = {"input": (0.05, 1 * GIB), "events": (0.25, 8 * GIB), "prd": (0.05, 1 * GIB)}
#: Stream → the environment variable that sets its size (the user's value wins over the budget).
ENV: Final = {"input": "JIDO_INPUT_MAX_BYTES", "events": "JIDO_EVENTS_MAX_BYTES", "prd": "JIDO_PRD_MAX_BYTES"}
#: Stream → its JetStream name.
STREAMS: Final = {"input": "JIDO_CONV_IN", "events": "JIDO_EVENTS", "prd": "JIDO_PRD"}
#: The share of the free space nats-server grants to reservations (``diskAvailable``: 3/4).
SERVER_SHARE: Final = 0.75
#: The file in the store that keeps the sizes chosen when it was created.
BUDGET_FILE: Final = "stream-budget.json"
#: No stream is sized below this.
FLOOR: Final = 1 * MIB
#: Where the embedded server keeps its store: ``up`` tells its services, so that a write the
#: server never acknowledged can be named for what it is when that disk is full.
STORE_ENV: Final = "JIDO_NATS_STORE"
#: A store whose disk has less free space than this counts as full (a journal step may not fit).
FULL_BELOW: Final = 16 * MIB


class StreamBudget(BaseModel):
    """The sizes of the streams of one store, chosen once from its disk's free space."""

    model_config = ConfigDict(frozen=True)

    free_bytes: int
    sizes: dict[str, int]

    @property
    def server_max_bytes(self) -> int:
        """The server's ``max_file_store``: what it would grant on the store's first start.

        Written into its config, so that a server restarted on a full disk does not take the
        few bytes then free as its limit for good (it measures free space only when it starts)
        and refuse every write once the space is back.
        """
        return int(self.free_bytes * SERVER_SHARE)


def size_streams(free_bytes: int) -> StreamBudget:
    """The budget of a store whose disk has ``free_bytes`` free (pure): each stream its share of
    :data:`SHARES`, at most its cap, at least :data:`FLOOR`."""
    sizes = {name: max(FLOOR, min(cap, int(free_bytes * share))) for name, (share, cap) in SHARES.items()}
    return StreamBudget(free_bytes=free_bytes, sizes=sizes)


def measure(store_dir: Path) -> int:
    """The bytes a store could use: its disk's free space plus what the store already holds (a
    store older than its budget file counts its own data as room)."""
    return shutil.disk_usage(store_dir).free + _held(store_dir / "jetstream")


def _held(folder: Path) -> int:
    """The bytes the files under ``folder`` take on disk."""
    held = 0
    for where, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                held += os.lstat(os.path.join(where, name)).st_blocks * 512
    return held


def stream_use(store_dir: Path) -> dict[str, int]:
    """Stream name → the bytes its files take in the store at ``store_dir`` (every account)."""
    use: dict[str, int] = {}
    for streams in sorted((store_dir / "jetstream").glob("*/streams")):
        for folder in sorted(streams.iterdir()):
            use[folder.name] = use.get(folder.name, 0) + _held(folder)
    return use


def describe_streams(store_dir: Path) -> str | None:
    """What the streams of the store at ``store_dir`` use, each with its size when it has one:
    ``JIDO_EVENTS 3 MiB of 512 MiB, JIDO_JOURNAL 1 MiB``; ``None`` for a store not made yet."""
    use = stream_use(store_dir)
    if not use:
        return None
    limits: dict[str, int] = {}
    with contextlib.suppress(OSError, ValidationError):
        sizes = StreamBudget.model_validate_json((store_dir / BUDGET_FILE).read_bytes()).sizes
        limits = {STREAMS[name]: size for name, size in sizes.items() if name in STREAMS}
    return ", ".join(
        f"{name} {format_bytes(held)}" + (f" of {format_bytes(limits[name])}" if name in limits else "")
        for name, held in use.items()
    )


def stream_budget(store_dir: Path) -> StreamBudget:
    """The budget kept in ``<store>/stream-budget.json``; made from :func:`measure` and written
    there when the file is missing or unreadable."""
    path = store_dir / BUDGET_FILE
    with contextlib.suppress(OSError, ValidationError):
        kept = StreamBudget.model_validate_json(path.read_bytes())
        if set(kept.sizes) == set(SHARES):
            return kept
    budget = size_streams(measure(store_dir))
    with contextlib.suppress(OSError):  # a full disk: the sizes still apply to this start
        path.write_text(budget.model_dump_json() + "\n")
    return budget


def budget_env(budget: StreamBudget, env: Mapping[str, str]) -> dict[str, str]:
    """The variables of :data:`ENV` to add to ``env`` for ``budget`` (pure): those not set yet."""
    return {var: str(budget.sizes[name]) for name, var in ENV.items() if not env.get(var)}


def sizes_in_effect(env: Mapping[str, str]) -> dict[str, int]:
    """Stream → the size its variable of :data:`ENV` sets in ``env`` (pure); a missing or
    unreadable value is left out (the service reading it names a bad one)."""
    sizes: dict[str, int] = {}
    for name, var in ENV.items():
        with contextlib.suppress(KeyError, ValueError):
            sizes[name] = int(env[var])
    return sizes


def refusal(sizes: Mapping[str, int], free_bytes: int, store_dir: Path) -> str | None:
    """Why nats-server would refuse the streams of ``sizes`` on a new store at ``store_dir`` whose
    disk has ``free_bytes`` free, naming the disk, the space needed and the settings (pure);
    ``None`` when they fit."""
    needed = sum(size for size in sizes.values() if size > 0)
    granted = int(free_bytes * SERVER_SHARE)
    if needed <= granted:
        return None
    settings = ", ".join(f"{ENV[name]}={size}" for name, size in sizes.items() if size > 0)
    return (
        f"the JetStream store {store_dir} cannot be created: its streams reserve {format_bytes(needed)} "
        f"({settings}) and nats-server grants at most {format_bytes(granted)} "
        f"(75 % of the {format_bytes(free_bytes)} free on that disk). Free space there, lower these "
        "settings (unset them to size the streams from the free space), or pass --store on a larger disk"
    )


def format_bytes(n: int) -> str:
    """``n`` bytes for a person: ``512 MiB``, ``1.5 GiB`` (pure)."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.0f} MiB"


def full_store(env: Mapping[str, str]) -> tuple[Path, int] | None:
    """The embedded server's store (:data:`STORE_ENV`) and its disk's free bytes when that disk is
    full (under :data:`FULL_BELOW`); ``None`` when it has room or this process cannot see it (a
    server elsewhere: compose, Kubernetes)."""
    where = env.get(STORE_ENV)
    if not where:
        return None
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return None
    return (Path(where), free) if free < FULL_BELOW else None
