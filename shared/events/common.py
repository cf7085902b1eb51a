"""Event types every service uses: the error event.

A successful request is answered with the reply model its command declares
(``Command[Reply]``, see ``_base``); a failed one with an ``error`` event.
"""

from __future__ import annotations

from typing import Final

from ._base import EventModel

__all__ = ["ERROR_TYPE", "EVENTS"]

#: CloudEvent type of an error event. Its data is ``jidocode.shared.errors.ErrorInfo``
#: (``type``, ``message``, ``retryable``, ``details``); it is kept out of the
#: discriminated union because its data has a ``type`` field of its own.
ERROR_TYPE: Final = "error"

EVENTS: tuple[type[EventModel], ...] = ()
