"""The PRD service's egress proxy: the one way out for a provider CLI whose ``use_login`` is on.

One per PRD replica, started the first time such a CLI runs (:func:`login_proxy`); each run
gets a pass that allows the provider's declared domains and nothing else
(:func:`login_opener`, the ``egress`` of its :class:`~.providers.base.ProviderContext`), the
user's ``sandbox.denied_domains`` still winning. Its decisions are ``tool.network`` signals
named ``prd/<provider>`` (docs/network.md, docs/prd-providers.md).
"""

from __future__ import annotations

import logging

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.egress import CallScope, DomainsOpener, LazyProxy, domains_opener
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ToolNetwork
from jidocode.shared.policy import Policy
from jidocode.shared.settings import load_settings, require_usable

__all__ = ["login_opener", "login_proxy"]

log = logging.getLogger("jidocode.prd")


def login_proxy(bus: Bus) -> LazyProxy:
    """The replica's proxy (not started yet), publishing its decisions on ``bus``."""

    async def publish(event: ToolNetwork, scope: CallScope) -> None:
        await bus.emit(event, project_id=scope.project_id)

    return LazyProxy(on_event=publish)


def login_opener(proxy: LazyProxy | None, project_id: str, config: Config) -> DomainsOpener | None:
    """Passes for ``project_id``'s provider CLIs; ``None`` (no network) without a proxy, or while
    the user's settings have an error (their denied entries could not be honoured)."""
    if proxy is None:
        return None
    home = config.jido_home
    try:
        sandbox = require_usable(
            load_settings(None, jido_home=home), refused="a provider's login network"
        ).sandbox
        policy = Policy.build(str(home), jido_home=str(home), denied_domains=sandbox.denied_domains)
    except (JidoError, ValueError, OSError) as exc:
        log.warning("no network for provider logins of %s: %s", project_id, exc)
        return None
    return domains_opener(proxy, project_id=project_id, policy=policy)
