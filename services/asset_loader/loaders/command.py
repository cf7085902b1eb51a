"""Slash commands: ``commands/<name>.md`` (markdown + frontmatter) and their templating.

Frontmatter: ``name`` (default: the file name), ``description`` (default:
the first line of the body), ``arguments`` (a list of names or of
``{name, description, required, default}``), ``argument-hint``,
``allowed-tools``, ``model``. The body is the prompt template:

* ``$ARGUMENTS`` — all arguments as one string;
* ``$1`` … ``$9`` — positional arguments (missing ones render empty);
* ``{{name}}`` — a declared argument, by name (from a mapping, or the
  positional argument at the declared index); unknown names stay as written.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jidocode.services.asset_loader.models import CommandArgument, CommandAsset
from jidocode.services.asset_loader.text import (
    decode_text,
    jsonable,
    name_problem,
    parse_tool_list,
    split_frontmatter,
)
from jidocode.shared.errors import InvalidInput
from jidocode.shared.settings import Diagnostic

__all__ = ["MAX_RENDERED_CHARS", "parse_command", "render_command"]

MAX_RENDERED_CHARS: Final = 256 * 1024
_KNOWN: Final = {
    "name",
    "description",
    "arguments",
    "argument-hint",
    "allowed-tools",
    "allowed_tools",
    "model",
}
#: Keys whose value is taken as written: Claude Code's ``argument-hint: [file] [line]``.
_VERBATIM: Final = frozenset({"argument-hint"})
_POSITIONAL: Final = re.compile(r"\$([1-9])")
_NAMED: Final = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_\-]*)\s*\}\}")
_ARG_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")


def parse_command(
    raw: bytes, *, path: str, stem: str, layer: str
) -> tuple[CommandAsset | None, list[Diagnostic]]:
    """Parse one command file; ``stem`` is its name relative to ``commands/`` without ``.md``."""
    text, diags = decode_text(raw, path)
    if text is None:
        return None, diags
    fm, body, fm_diags = split_frontmatter(text, path, verbatim=_VERBATIM)
    diags.extend(fm_diags)
    if fm is None:
        return None, diags
    name = fm.get("name", stem)
    problem = name_problem(name, stem, "file name")
    if problem is not None:
        diags.append(Diagnostic(file=path, key="name", problem=problem))
        return None, diags
    name = stem  # checked equal above
    description = fm.get("description")
    if description is None:
        description = next((ln.strip("# ").strip() for ln in body.splitlines() if ln.strip()), "")
    elif not isinstance(description, str):
        diags.append(Diagnostic(file=path, key="description", problem="must be a string"))
        return None, diags
    arguments = _arguments(fm.get("arguments"), path, diags)
    hint = fm.get("argument-hint")
    tools_key = "allowed-tools" if "allowed-tools" in fm else "allowed_tools"
    allowed, tool_diags = parse_tool_list(fm.get(tools_key), path, tools_key)
    diags.extend(tool_diags)
    model = fm.get("model")
    if model is not None and not isinstance(model, str):
        diags.append(Diagnostic(file=path, key="model", problem="must be a string", severity="warning"))
        model = None
    if not body.strip():
        diags.append(Diagnostic(file=path, problem="empty command body", severity="warning"))
    command = CommandAsset(
        name=name,
        description=description,
        arguments=arguments,
        argument_hint=str(hint) if hint is not None else None,
        allowed_tools=allowed,
        model=model,
        template=body,
        extra={k: jsonable(v) for k, v in fm.items() if k not in _KNOWN},
        path=path,
        layer=layer,
    )
    return command, diags


def _arguments(value: Any, path: str, diags: list[Diagnostic]) -> list[CommandArgument]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list):
        diags.append(Diagnostic(file=path, key="arguments", problem="must be a list"))
        return []
    out: list[CommandArgument] = []
    for i, item in enumerate(value):
        key = f"arguments[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            diags.append(Diagnostic(file=path, key=key, problem="argument needs a string name"))
            continue
        name = item["name"]
        if not _ARG_NAME.match(name) or any(a.name == name for a in out):
            diags.append(
                Diagnostic(file=path, key=key, problem=f"invalid or repeated argument name {name!r}")
            )
            continue
        default = item.get("default")
        desc = item.get("description")
        out.append(
            CommandArgument(
                name=name,
                description=desc if isinstance(desc, str) else None,
                required=item.get("required") is True,
                default=None if default is None else str(default),
            )
        )
    return out


def _split(arguments: str) -> list[str]:
    try:
        return shlex.split(arguments)
    except ValueError:
        return arguments.split()


def render_command(command: CommandAsset, args: str | Sequence[str] | Mapping[str, Any] | None = None) -> str:
    """The command's prompt with its arguments filled in.

    ``args`` is the raw argument string (split like a shell), a list of
    positional arguments, or a mapping by declared name. A required argument
    that is missing raises :class:`InvalidInput`.
    """
    named: dict[str, str] = {}
    if args is None:
        raw, positional = "", []
    elif isinstance(args, str):
        raw, positional = args, _split(args)
    elif isinstance(args, Mapping):
        named = {str(k): "" if v is None else str(v) for k, v in args.items()}
        positional = [named[a.name] for a in command.arguments if a.name in named]
        raw = named.get("ARGUMENTS", " ".join(shlex.quote(p) for p in positional))
    else:
        positional = [str(p) for p in args]
        raw = " ".join(shlex.quote(p) for p in positional)
    for i, arg in enumerate(command.arguments):
        if arg.name not in named:
            if i < len(positional):
                named[arg.name] = positional[i]
            elif arg.default is not None:
                named[arg.name] = arg.default
            elif arg.required:
                raise InvalidInput(
                    f"command {command.name!r} needs argument {arg.name!r}",
                    details={"command": command.name, "argument": arg.name},
                )
    declared = {a.name for a in command.arguments}
    text = command.template.replace("$ARGUMENTS", raw)
    text = _POSITIONAL.sub(
        lambda m: positional[int(m.group(1)) - 1] if int(m.group(1)) <= len(positional) else "", text
    )
    text = _NAMED.sub(
        lambda m: (
            named[m.group(1)]
            if m.group(1) in named and (m.group(1) in declared or not declared)
            else m.group(0)
        ),
        text,
    )
    if len(text) > MAX_RENDERED_CHARS:
        raise InvalidInput(f"rendered command is longer than {MAX_RENDERED_CHARS} characters")
    return text
