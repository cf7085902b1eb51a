"""Fuzzy scoring for asset search: typo tolerant, not substring-only.

``score(query, name, text)`` is in ``[0, 1]``: an exact name is 1, a name
that starts with or contains the query scores high, otherwise the best
:class:`difflib.SequenceMatcher` ratio between the query and the name (or any
word of the name or text) counts, so ``pdf-procesor`` still finds
``pdf-processor`` and ``extrct`` finds a skill whose description says
"extract".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from difflib import SequenceMatcher
from typing import Final, TypeVar

__all__ = ["MIN_SCORE", "rank_by", "score"]

MIN_SCORE: Final = 0.6
_WORD: Final = re.compile(r"[a-z0-9]+")
_MAX_TEXT_WORDS: Final = 400

T = TypeVar("T")


def _ratio(a: str, b: str) -> float:
    if not a or not b:
        return 0.0
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < MIN_SCORE or matcher.quick_ratio() < MIN_SCORE:
        return 0.0
    return matcher.ratio()


def score(query: str, name: str, text: str = "") -> float:
    q = query.strip().lower()
    n = name.lower()
    if not q:
        return 0.0
    if q == n:
        return 1.0
    if n.startswith(q):
        return 0.95
    if q in n:
        return 0.9
    best = _ratio(q, n)
    name_words = _WORD.findall(n)
    q_words = _WORD.findall(q)
    for word in name_words:
        best = max(best, 0.85 * _ratio(q, word))
    if text:
        lowered = text.lower()
        if q in lowered:
            best = max(best, 0.8)
        words = set(_WORD.findall(lowered)[:_MAX_TEXT_WORDS])
        if q_words:
            # Every query word must match some word of the text reasonably well.
            per_word = []
            for qw in q_words:
                per_word.append(max((_ratio(qw, w) for w in words), default=0.0))
            best = max(best, 0.75 * min(per_word))
    return best


def rank_by(query: str, items: Iterable[tuple[T, str, str]], *, limit: int = 20) -> list[tuple[T, float]]:
    """``(item, name, text)`` triples ranked by :func:`score`, best first, above :data:`MIN_SCORE`."""
    scored = [(item, score(query, name, text)) for item, name, text in items]
    hits = [(item, s) for item, s in scored if s >= MIN_SCORE]
    hits.sort(key=lambda pair: -pair[1])
    return hits[:limit]
