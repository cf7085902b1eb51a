"""Sub-agent templates: Claude Code's sub-agent format, from the project and the user's home.

A template is a markdown file ``<name>.md`` in ``<root>/<data_dir>/agents/`` (the
project layer; ``.jido_code/agents/`` and Claude Code's ``.claude/agents/`` in the root
are read too, ``.claude`` lowest) or in ``<global home>/agents/`` (``~/.jido_code/agents/``)::

    ---
    name: reviewer
    description: Reviews a change and reports problems
    tools: read_file, grep, glob
    model: inherit
    ---
    You are a careful reviewer. ...

The body is the child's system prompt; ``tools`` (a comma-separated string or a
list; absent: every tool of the parent) narrows what the child is offered, never
widens it; ``model`` (absent, ``inherit`` or one of Claude Code's aliases
``sonnet``/``opus``/``haiku``: the parent's model) names a litellm model.

Trust (as for every project asset): a project template is untrusted input until
the user trusts the project. Its prompt and its ``tools`` are used (they can only
restrict: the child never gets more than its parent), its ``model`` is ignored (an
untrusted project cannot choose what the user pays for), and the file is parsed
with YAML's safe loader under a size limit; below the project root no link is
followed and a hard-linked file is refused (decision 0301). The project layer
overrides the global one by name, as for skills.

Pure parsing (:func:`parse_template`) is separate from reading the folders
(:func:`load_templates`); a bad file is a :class:`TemplateProblem` naming the file
and what is wrong, and never hides the other templates.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal

import frontmatter
import yaml
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.nofollow import open_dir, open_read

__all__ = [
    "DEFAULT_TEMPLATE",
    "INHERIT_MODELS",
    "MAX_TEMPLATE_BYTES",
    "AgentTemplate",
    "TemplateProblem",
    "Templates",
    "load_templates",
    "parse_template",
    "template_dirs",
]

#: Largest template file read (bytes); a bigger one is a problem, not a prompt.
MAX_TEMPLATE_BYTES: Final = 64 * 1024
#: Templates read per folder at most (the rest are reported).
MAX_TEMPLATES_PER_DIR: Final = 200
#: Claude Code's project folder of sub-agents, read as the lowest project layer.
CLAUDE_AGENTS: Final = Path(".claude", "agents")
#: ``model`` values that mean "the parent's model".
INHERIT_MODELS: Final = frozenset({"inherit", "sonnet", "opus", "haiku"})

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

Layer = Literal["builtin", "global", "project"]


class AgentTemplate(BaseModel):
    """One sub-agent template, validated."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=_NAME.pattern)
    description: str = ""
    system_prompt: str = ""
    #: Tool names the child may be offered; ``None``: all of the parent's.
    tools: tuple[str, ...] | None = None
    #: A litellm model; ``None``: the parent's.
    model: str | None = None
    layer: Layer = "builtin"
    path: str = ""


class TemplateProblem(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    problem: str


#: The template used when the model names none (``subagent_type`` empty or ``general-purpose``).
DEFAULT_TEMPLATE: Final = AgentTemplate(
    name="general-purpose",
    description="A general-purpose agent for a self-contained task: it has the same tools as you",
    system_prompt=(
        "You are a sub-agent working on one self-contained task for another agent. Do the task "
        "with the tools you have, then answer with a concise, complete report of what you found "
        "or did: your final message is all the other agent will see."
    ),
)


class Templates(BaseModel):
    """The templates of a project (project layer over global layer over the default)."""

    model_config = ConfigDict(frozen=True)

    by_name: dict[str, AgentTemplate] = Field(default_factory=dict)
    problems: tuple[TemplateProblem, ...] = ()

    def get(self, name: str) -> AgentTemplate | None:
        if not name or name == DEFAULT_TEMPLATE.name:
            return self.by_name.get(DEFAULT_TEMPLATE.name, DEFAULT_TEMPLATE)
        return self.by_name.get(name)

    def names(self) -> list[str]:
        return sorted({DEFAULT_TEMPLATE.name, *self.by_name})


def _tools(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError("'tools' must be a comma-separated string or a list of tool names")
    return tuple(dict.fromkeys(item for item in items if item))


def parse_template(text: str, *, path: str, layer: Layer, trusted: bool = True) -> AgentTemplate:
    """The template in ``text`` (the file at ``path``); ``ValueError`` saying what is wrong.

    ``name`` defaults to the file's stem. An untrusted template's ``model`` is dropped.
    """
    if len(text.encode()) > MAX_TEMPLATE_BYTES:
        raise ValueError(f"larger than {MAX_TEMPLATE_BYTES} bytes")
    try:
        post = frontmatter.loads(text)  # YAML front matter through yaml.SafeLoader
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML: {exc}") from None
    meta = post.metadata
    name = meta.get("name", Path(path).stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"'name' must be 1-64 characters of a-z, 0-9, '-' or '_' starting with a letter or digit, not {name!r}"
        )
    description = meta.get("description", "")
    if not isinstance(description, str):
        raise ValueError("'description' must be a string")
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise ValueError("'model' must be a string")
    if model is not None and (model.strip().lower() in INHERIT_MODELS or not model.strip()):
        model = None
    if not trusted:
        model = None
    return AgentTemplate(
        name=name,
        description=description.strip(),
        system_prompt=post.content.strip(),
        tools=_tools(meta.get("tools")),
        model=model.strip() if model else None,
        layer=layer,
        path=path,
    )


def template_dirs(root: Path | None, *, home: Path, data_dir: str = ".jido") -> list[tuple[Path, Layer]]:
    """The folders read, lowest layer first (Claude Code's ``.claude/agents/`` lowest of the project's,
    so a ``.jido`` template wins over it)."""
    dirs: list[tuple[Path, Layer]] = [(home / "agents", "global")]
    if root is not None:
        dirs.append((root / CLAUDE_AGENTS, "project"))
        dirs.append((root / ".jido_code" / "agents", "project"))
        if Path(data_dir) != Path(".jido_code"):
            dirs.append((root / data_dir / "agents", "project"))
    return dirs


def _md_names(folder: Path, root: Path | None) -> list[str]:
    """The ``.md`` names in ``folder``; below a project ``root`` no link on the way is followed."""
    if root is None:
        return sorted(p.name for p in folder.iterdir() if p.suffix == ".md")
    with open_dir(root, folder.relative_to(root).parts) as dfd:
        return sorted(name for name in os.listdir(dfd) if name.endswith(".md"))


def _read_text(file: Path, root: Path | None) -> str:
    """The text of ``file`` (at most :data:`MAX_TEMPLATE_BYTES`); below a project ``root`` a file
    that is a link, not regular or hard-linked is refused (``UnsafePath``), as every project file."""
    if root is None:
        if file.stat().st_size > MAX_TEMPLATE_BYTES:
            raise ValueError(f"larger than {MAX_TEMPLATE_BYTES} bytes")
        return file.read_text(encoding="utf-8")
    with (
        open_dir(root, file.parent.relative_to(root).parts) as dfd,
        os.fdopen(open_read(dfd, file.name, shown=file), "rb") as handle,
    ):
        data = handle.read(MAX_TEMPLATE_BYTES + 1)
    if len(data) > MAX_TEMPLATE_BYTES:
        raise ValueError(f"larger than {MAX_TEMPLATE_BYTES} bytes")
    return data.decode("utf-8")


def _read_dir(
    folder: Path, layer: Layer, trusted: bool, root: Path | None = None
) -> Iterable[AgentTemplate | TemplateProblem]:
    try:
        files = [folder / name for name in _md_names(folder, root)]
    except (FileNotFoundError, NotFound):
        return
    except OSError as exc:
        yield TemplateProblem(path=str(folder), problem=f"cannot list the folder: {exc.strerror}")
        return
    except JidoError as exc:
        yield TemplateProblem(path=str(folder), problem=exc.message)
        return
    for index, file in enumerate(files):
        if index >= MAX_TEMPLATES_PER_DIR:
            yield TemplateProblem(
                path=str(folder), problem=f"more than {MAX_TEMPLATES_PER_DIR} templates: the rest are ignored"
            )
            return
        try:
            text = _read_text(file, root)
            yield parse_template(text, path=str(file), layer=layer, trusted=trusted or layer != "project")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            yield TemplateProblem(path=str(file), problem=str(exc))
        except JidoError as exc:
            yield TemplateProblem(path=str(file), problem=exc.message)


def load_templates(root: Path | None, *, home: Path, trusted: bool, data_dir: str = ".jido") -> Templates:
    """Every template of the project's layers (blocking: run it in a thread).

    A ``.claude/agents/`` template that a ``.jido`` one of the same name replaces is a problem
    naming both (the ``.jido`` one is used)."""
    by_name: dict[str, AgentTemplate] = {}
    problems: list[TemplateProblem] = []
    claude = root / CLAUDE_AGENTS if root is not None else None
    for folder, layer in template_dirs(root, home=home, data_dir=data_dir):
        for found in _read_dir(folder, layer, trusted, root if layer == "project" else None):
            if isinstance(found, TemplateProblem):
                problems.append(found)
                continue
            previous = by_name.get(found.name)
            if previous is not None and claude is not None and Path(previous.path).parent == claude:
                problems.append(
                    TemplateProblem(
                        path=previous.path,
                        problem=f"agent {found.name!r} is also defined by {found.path}, which wins "
                        "(.jido over .claude): this one is not used",
                    )
                )
            by_name[found.name] = found
    return Templates(by_name=by_name, problems=tuple(problems))
