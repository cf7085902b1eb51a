"""The web console's routes (owned by the console work; a stub until it lands)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import BaseRoute

if TYPE_CHECKING:
    from jidocode.services.gateway.context import GatewayContext

__all__ = ["routes"]


def routes(ctx: GatewayContext) -> list[BaseRoute]:
    """The console's routes, mounted by :func:`jidocode.services.gateway.app.create_app`."""
    return []
