"""What every gateway handler needs: the bus, the settings, the token checker, typed clients.

Handlers get it from ``request.app.state.ctx``. The gateway holds no state of its
own: every answer comes from the services through the typed clients of
:mod:`jidocode.shared.clients`, so replicas behind a load balancer are alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jidocode.shared.bus import Bus
from jidocode.shared.clients import (
    AssetsClient,
    ConversationsClient,
    EngineClient,
    PrdClient,
    ProjectClient,
    ToolsClient,
)
from jidocode.shared.config import Config

from .auth import TokenChecker
from .settings import GatewaySettings

__all__ = ["GatewayContext", "StreamCounters"]

#: Seconds a request to a service may take before the gateway answers 503.
DEFAULT_TIMEOUT_S = 10.0


@dataclass
class StreamCounters:
    """SSE streams of this process: open now, and ended by each cause (for operators and tests)."""

    open: int = 0
    overflowed: int = 0
    failed: int = 0


@dataclass(frozen=True, eq=False)
class GatewayContext:
    """The connected bus, the configuration and the token checker of one gateway process."""

    bus: Bus
    config: Config
    settings: GatewaySettings
    auth: TokenChecker
    timeout: float = DEFAULT_TIMEOUT_S
    streams: StreamCounters = field(default_factory=StreamCounters)

    def engine(self) -> EngineClient:
        return EngineClient(self.bus, timeout=self.timeout)

    def project(self, project_id: str) -> ProjectClient:
        return ProjectClient(self.bus, project_id, timeout=self.timeout)

    def conversations(self, project_id: str) -> ConversationsClient:
        return ConversationsClient(self.bus, project_id, timeout=self.timeout)

    def tools(self, project_id: str) -> ToolsClient:
        return ToolsClient(self.bus, project_id, timeout=self.timeout)

    def assets(self, project_id: str) -> AssetsClient:
        return AssetsClient(self.bus, project_id, timeout=self.timeout)

    def prd(self, project_id: str) -> PrdClient:
        return PrdClient(self.bus, project_id, timeout=self.timeout)
