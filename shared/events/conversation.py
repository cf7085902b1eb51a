"""Conversation events. The owner of this domain adds its models here and lists them in EVENTS."""

from __future__ import annotations

from ._base import EventModel

__all__ = ["EVENTS"]

EVENTS: tuple[type[EventModel], ...] = ()
