"""A YAML loader for untrusted asset files: safe tags only, with hard limits.

Error tree::

    YamlError (ValueError)        any problem, with a readable message
    └── YamlLimitError            a limit was hit (size, depth, anchors, aliases, nodes)

The document is built in one pass over the parser's event stream (libyaml's
C parser when available), so every limit is checked *before* the structure
it guards exists:

* the text size (callers check the byte size before decoding, too);
* nesting depth;
* the number of anchors and of alias uses;
* the number of nodes *after* alias expansion, so a "billion laughs"
  document is refused although it is tiny on disk.

Only the YAML 1.1 core tags are accepted (null, bool, int, float, str, and
timestamps, which stay strings); any other explicit tag is an error. A
mapping with the same key twice, or with a key that is not a scalar, is an
error rather than "last one wins". Merge keys (``<<``) work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

__all__ = ["DEFAULT_LIMITS", "YamlError", "YamlLimitError", "YamlLimits", "load_yaml"]


class YamlError(ValueError):
    """The text is not acceptable YAML."""


class YamlLimitError(YamlError):
    """A configured limit was exceeded."""


@dataclass(frozen=True, slots=True)
class YamlLimits:
    max_chars: int = 256 * 1024
    max_depth: int = 32
    max_anchors: int = 32
    max_aliases: int = 64
    max_nodes: int = 20_000

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_depth", "max_anchors", "max_aliases", "max_nodes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")


DEFAULT_LIMITS: Final = YamlLimits()

_PARSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCTOR: Final = SafeConstructor()
_P = "tag:yaml.org,2002:"
_SCALARS: Final = {
    f"{_P}null": SafeConstructor.construct_yaml_null,
    f"{_P}bool": SafeConstructor.construct_yaml_bool,
    f"{_P}int": SafeConstructor.construct_yaml_int,
    f"{_P}float": SafeConstructor.construct_yaml_float,
}
_STRINGS: Final = {f"{_P}str", f"{_P}timestamp", "!"}
_MERGE: Final = f"{_P}merge"
_SCALAR_EVENT: Final = yaml.ScalarEvent
_ALIAS_EVENT: Final = yaml.AliasEvent
_MAP_START: Final = yaml.MappingStartEvent
_SEQ_START: Final = yaml.SequenceStartEvent
_MAP_END: Final = yaml.MappingEndEvent
_SEQ_END: Final = yaml.SequenceEndEvent
_DOC_START: Final = yaml.DocumentStartEvent


_IMPLICIT: Final = Resolver.yaml_implicit_resolvers
_WILDCARD: Final = tuple(_IMPLICIT.get(None, ()))


def _scalar(event: yaml.ScalarEvent) -> Any:
    tag = event.tag
    value: str = event.value
    if tag is None:
        if not event.implicit[0]:
            return value  # quoted: always a string
        # Inlined ``Resolver.resolve`` (this is the hot path of a cold load).
        for candidate, regexp in (*_IMPLICIT.get(value[:1], ()), *_WILDCARD):
            if regexp.match(value):
                tag = candidate
                break
        else:
            return value
    elif tag == "!":
        return value
    if tag in _STRINGS:
        return value
    if tag == _MERGE:
        return _Merge
    construct = _SCALARS.get(tag)
    if construct is None:
        raise YamlError(f"unsupported tag {tag!r}{_at(event)}")
    return construct(_CONSTRUCTOR, ScalarNode(tag, value))


class _MergeKey:
    """The ``<<`` key."""


_Merge: Final = _MergeKey()


def _at(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" at line {mark.line + 1}" if mark is not None else ""


class _NoKey:
    pass


_NOKEY: Final = _NoKey()


class _Open:
    """A collection being built: the container, its anchor, the node count where it started,
    the key waiting for its value (a mapping's) and the ``<<`` sources to merge at its end."""

    __slots__ = ("anchor", "container", "is_map", "key", "merges", "start")

    def __init__(self, container: Any, anchor: str | None, start: int, is_map: bool) -> None:
        self.container = container
        self.anchor = anchor
        self.start = start
        self.is_map = is_map
        self.key: Any = _NOKEY
        self.merges: list[dict[Any, Any]] = []

    def put(self, value: Any) -> None:
        """Add a finished value: a sequence's next item, a mapping's next key or its value."""
        if not self.is_map:
            self.container.append(value)
        elif self.key is _NOKEY:
            if isinstance(value, dict | list):
                raise YamlError("a mapping key must be a scalar")
            self.key = value
        else:
            key, self.key = self.key, _NOKEY
            self._set(key, value)

    def _set(self, key: Any, value: Any) -> None:
        if key is _Merge:
            sources = value if isinstance(value, list) else [value]
            if not all(isinstance(s, dict) for s in sources):
                raise YamlError("a merge key (<<) needs a mapping or a list of mappings")
            self.merges.extend(sources)
            return
        try:
            duplicate = key in self.container
        except TypeError:
            raise YamlError(f"unhashable mapping key {key!r}") from None
        if duplicate:
            raise YamlError(f"duplicate key {key!r}")
        self.container[key] = value

    def close(self) -> Any:
        """The finished container, with the merged keys it does not set itself."""
        for source in reversed(self.merges):
            for k, v in source.items():
                self.container.setdefault(k, v)
        return self.container


class _Builder:
    """Builds the document from parser events, counting every limit as it goes."""

    __slots__ = (
        "aliases",
        "anchored",
        "anchors",
        "depth",
        "documents",
        "limits",
        "result",
        "sizes",
        "stack",
        "total",
    )

    def __init__(self, limits: YamlLimits) -> None:
        self.limits = limits
        self.depth = self.anchors = self.aliases = self.total = self.documents = 0
        self.anchored: dict[str, Any] = {}
        self.sizes: dict[str, int] = {}
        self.stack: list[_Open] = []
        self.result: Any = None

    def count(self, n: int) -> None:
        self.total += n
        if self.total > self.limits.max_nodes:
            raise YamlLimitError(f"more than {self.limits.max_nodes} nodes after alias expansion")

    def anchor(self, name: str | None) -> None:
        if name is not None:
            self.anchors += 1
            if self.anchors > self.limits.max_anchors:
                raise YamlLimitError(f"more than {self.limits.max_anchors} anchors")

    def add(self, value: Any) -> None:
        """A finished value goes into the open collection (or is the document)."""
        if self.stack:
            self.stack[-1].put(value)
        else:
            self.result = value

    def scalar(self, event: yaml.ScalarEvent) -> None:
        self.count(1)
        self.anchor(event.anchor)
        value = _scalar(event)
        if event.anchor is not None:
            self.anchored[event.anchor] = value
            self.sizes[event.anchor] = 1
        self.add(value)

    def alias(self, event: yaml.AliasEvent) -> None:
        """An alias counts the nodes of what it repeats."""
        self.aliases += 1
        if self.aliases > self.limits.max_aliases:
            raise YamlLimitError(f"more than {self.limits.max_aliases} aliases")
        if event.anchor not in self.anchored:
            raise YamlError(f"undefined alias {event.anchor!r}{_at(event)}")
        self.count(self.sizes.get(event.anchor, 1))
        self.add(self.anchored[event.anchor])

    def start(self, event: yaml.CollectionStartEvent, *, is_map: bool) -> None:
        _check_tag(event, f"{_P}map" if is_map else f"{_P}seq")
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise YamlLimitError(f"nested deeper than {self.limits.max_depth} levels")
        self.count(1)
        self.anchor(event.anchor)
        container: Any = {} if is_map else []
        if event.anchor is not None:
            self.anchored[event.anchor] = container
        self.stack.append(_Open(container, event.anchor, self.total - 1, is_map))

    def end(self) -> None:
        self.depth -= 1
        done = self.stack.pop()
        if done.anchor is not None:
            self.sizes[done.anchor] = self.total - done.start
        self.add(done.close())

    def document(self, event: yaml.DocumentStartEvent) -> None:
        self.documents += 1
        if self.documents > 1:
            raise YamlError(f"more than one YAML document{_at(event)}")


def _check_tag(event: yaml.CollectionStartEvent, expected: str) -> None:
    if event.tag is not None and event.tag not in (expected, "!"):
        raise YamlError(f"unsupported tag {event.tag!r}{_at(event)}")


def _build(events: Any, limits: YamlLimits) -> Any:
    """The document the parser's ``events`` describe, each limit checked before it is passed."""
    b = _Builder(limits)
    for event in events:
        cls = type(event)
        if cls is _SCALAR_EVENT:
            b.scalar(event)
        elif cls is _ALIAS_EVENT:
            b.alias(event)
        elif cls is _MAP_START:
            b.start(event, is_map=True)
        elif cls is _SEQ_START:
            b.start(event, is_map=False)
        elif cls is _MAP_END or cls is _SEQ_END:
            b.end()
        elif cls is _DOC_START:
            b.document(event)
    return b.result


def load_yaml(text: str, *, limits: YamlLimits = DEFAULT_LIMITS) -> Any:
    """Parse one YAML document from ``text`` under ``limits``.

    Raises :class:`YamlError` (or :class:`YamlLimitError`) with a readable
    message; never any other exception for any input string.
    """
    if len(text) > limits.max_chars:
        raise YamlLimitError(f"YAML text longer than {limits.max_chars} characters")
    if "\x00" in text:
        raise YamlError("NUL character in YAML text")
    try:
        return _build(yaml.parse(text, Loader=_PARSER), limits)
    except YamlError:
        raise
    except yaml.MarkedYAMLError as exc:
        where = f" at line {exc.problem_mark.line + 1}" if exc.problem_mark is not None else ""
        if "nesting depth" in (exc.problem or ""):  # PyYAML >= 6.0.4 has a depth limit of its own
            raise YamlLimitError(f"YAML nested too deeply: {exc.problem}{where}") from None
        raise YamlError(f"invalid YAML: {exc.problem or exc.context or 'syntax error'}{where}") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"invalid YAML: {exc}") from None
    except RecursionError:
        raise YamlLimitError("YAML nested too deeply") from None
    except (ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        raise YamlError(f"invalid YAML value: {exc}") from None
