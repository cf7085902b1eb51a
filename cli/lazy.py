"""A command group whose commands are imported when they run, not when the CLI starts.

``jidocode --help`` lists every command with its one-line help from a table
(:class:`LazyCommand`), so it imports none of the command modules (the bus, pydantic's event
catalogue, nats, bashlex …); ``jidocode status`` imports ``jidocode.cli.status`` and nothing
of the other commands. A command is a function (a typer command) or a ``typer.Typer`` (a
group of subcommands), named by ``"module:attribute"``.

A table entry whose module is not installed is left out of the listing (and is an unknown
command), so an entry may name a command that lands later. ``tests/unit/cli/test_lazy_cli.py``
checks that each entry's one-liner is the loaded command's own.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

import typer
import typer.core
import typer.main

if TYPE_CHECKING:  # typer 0.29 vendors click as typer._click; older ones use click itself
    from typer import _click

__all__ = ["LazyCommand", "LazyGroup", "defer_aiohttp_in_nats"]


class _ImportedOnFirstUse:
    """Stands for a module and imports it when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)


class _TransportWithoutAiohttp(importlib.abc.Loader):
    """Runs nats-py's transport module while ``import aiohttp`` fails, then gives it stand-ins."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if "aiohttp" in sys.modules:
            self._loader.exec_module(module)
            return
        sys.modules["aiohttp"] = None  # type: ignore[assignment]  # `import aiohttp` raises ImportError
        try:
            self._loader.exec_module(module)
        finally:
            del sys.modules["aiohttp"]
        if getattr(module, "aiohttp", ...) is None and getattr(module, "multidict", ...) is None:
            vars(module).update(
                aiohttp=_ImportedOnFirstUse("aiohttp"), multidict=_ImportedOnFirstUse("multidict")
            )

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename … for tracebacks
        return getattr(self._loader, name)


class _NatsTransportFinder(importlib.abc.MetaPathFinder):
    """Finds ``nats.aio.transport`` as usual and wraps its loader (once, then steps aside)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _NATS_TRANSPORT:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _TransportWithoutAiohttp(spec.loader)
        return spec


_NATS_TRANSPORT = "nats.aio.transport"


def defer_aiohttp_in_nats() -> None:
    """Have nats-py, when this process imports it, import aiohttp only for a websocket connection.

    nats-py's transport module imports aiohttp (and multidict) at import time, only for
    ``ws://`` servers; importing aiohttp takes about 0.1 s (it builds its TLS contexts), a
    third of a command's start. A finder wraps that one module's import: ``import aiohttp``
    fails while it runs (nats records aiohttp as absent), then its two names are pointed at
    stand-ins that import the real modules when a websocket connection first uses them.
    Nothing changes when nats' transport or aiohttp is imported already.
    """
    if _NATS_TRANSPORT in sys.modules or "aiohttp" in sys.modules:
        return
    if not any(isinstance(finder, _NatsTransportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NatsTransportFinder())


@dataclass(frozen=True)
class LazyCommand:
    """A command known by name and one-line help; its module is imported on first use.

    ``target`` is ``"module:attribute"``: a function (registered as a typer command named
    ``name``) or a ``typer.Typer`` app (a group named ``name``).
    """

    name: str
    target: str
    help: str

    @property
    def module(self) -> str:
        """The module that defines the command."""
        return self.target.partition(":")[0]

    def available(self) -> bool:
        """Whether the command's module is installed (found without importing it)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            return False

    def stub(self) -> _click.Command:
        """What the help listing shows: the name and the one-liner, nothing imported."""
        return typer.core.TyperCommand(name=self.name, help=self.help, callback=None)

    def load(self) -> _click.Command:
        """Import the module and build the click command (or group) of its attribute."""
        module, _, attribute = self.target.partition(":")
        defer_aiohttp_in_nats()
        obj = getattr(importlib.import_module(module), attribute)
        if isinstance(obj, typer.Typer):
            command: _click.Command = typer.main.get_group(obj)
        else:
            single = typer.Typer(rich_markup_mode=None)
            single.command(name=self.name)(obj)
            command = typer.main.get_command(single)
        command.name = self.name
        return command


class _Commands(MutableMapping[str, "_click.Command"]):
    """The group's commands: those registered directly, and the table's, built on first access.

    Iterating (the names, which typer's "did you mean" suggestions use) imports nothing.
    """

    def __init__(self, built: MutableMapping[str, _click.Command], table: tuple[LazyCommand, ...]) -> None:
        self._built = dict(built)
        self._table = {entry.name: entry for entry in table if entry.name not in built}
        self._order = [entry.name for entry in table]

    def entry(self, name: str) -> LazyCommand | None:
        """The table's entry ``name`` when it is installed and not built yet."""
        entry = self._table.get(name)
        if entry is None or name in self._built or not entry.available():
            return None
        return entry

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built:
            entry = self.entry(name)
            if entry is None:
                raise KeyError(name)
            self._built[name] = entry.load()
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._built.pop(name, None)
        self._table.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        """Commands registered directly first, then the table's in its order (built or installed)."""
        yield from (name for name in self._built if name not in self._order)
        yield from (name for name in self._order if name in self._built or self.entry(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class LazyGroup(typer.core.TyperGroup):
    """A typer group that adds the commands of :attr:`table`, each imported when it runs.

    Subclass it with a ``table`` and pass the subclass as ``typer.Typer(rich_markup_mode=None, cls=...)``.
    While it prints its own help it lists the table's entries as stubs (name and one-liner).
    """

    table: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands(self.commands, self.table)
        self._describing = False

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        assert isinstance(self.commands, _Commands)
        entry = self.commands.entry(cmd_name)
        if entry is not None and self._describing:
            return entry.stub()
        return self.commands.get(cmd_name)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._describing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._describing = False
