"""The gateway's settings, read from the environment and validated at construction.

=============================  ====================================================
variable                       meaning
=============================  ====================================================
``JIDO_GATEWAY_HOST``          the address to bind (default ``127.0.0.1``)
``JIDO_GATEWAY_PORT``          the port to bind (default ``8765``; ``0``: any free one)
``JIDO_GATEWAY_TOKEN``         the access token; unset: generated on first run and
                               kept in ``<data home>/gateway/token`` (0600)
``JIDO_GATEWAY_CORS_ORIGINS``  comma-separated origins allowed by CORS (default: none,
                               CORS off)
``JIDO_GATEWAY_PUBLIC_URL``    comma-separated URLs the gateway is reached at besides
                               its address (``https://jido.example.com`` behind a
                               proxy): the console's cookie and MCP over HTTP are
                               accepted from them too (decision 0305)
``JIDO_GATEWAY_MAX_BODY``      the largest request body in bytes (default: the bus's
                               payload limit)
``JIDO_GATEWAY_SSE_QUEUE``     events a bus-stream viewer may fall behind before its
                               stream is closed (default 1000)
=============================  ====================================================

Replicas behind a load balancer share one token through ``JIDO_GATEWAY_TOKEN``
(a Kubernetes Secret): the gateway keeps no other state.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jidocode.shared.config import default_data_home
from jidocode.shared.envelope import MAX_PAYLOAD_BYTES

from .origin import parse_public_url

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MIN_TOKEN_LENGTH", "GatewaySettings"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
#: A configured token shorter than this is refused (a guessable token is no protection).
MIN_TOKEN_LENGTH = 24


class GatewaySettings(BaseModel):
    """Where the gateway listens and how it authenticates."""

    model_config = ConfigDict(frozen=True)

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    token: str | None = Field(default=None, min_length=MIN_TOKEN_LENGTH, repr=False)
    data_home: Path = Field(default_factory=default_data_home)
    cors_origins: tuple[str, ...] = ()
    #: URLs (``scheme://host[:port]``) the gateway is reached at besides its own address.
    public_urls: tuple[str, ...] = ()
    max_body_bytes: int = Field(default=MAX_PAYLOAD_BYTES, ge=1024)
    #: Events a bus-stream (``/api/events``) viewer may fall behind before it is cut off.
    sse_queue: int = Field(default=1000, ge=1, le=100_000)
    #: Seconds between SSE keep-alive comments.
    sse_ping_s: float = Field(default=15.0, gt=0)
    #: Seconds one SSE write may wait on a reader that does not read before the stream is closed.
    sse_send_timeout_s: float = Field(default=30.0, gt=0)

    @field_validator("token")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not (value.isascii() and value.isprintable() and " " not in value):
            raise ValueError("JIDO_GATEWAY_TOKEN must be printable ASCII without spaces")
        return value

    @field_validator("public_urls")
    @classmethod
    def _public_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            parse_public_url(url)  # raises naming the URL
        return value

    @classmethod
    def from_env(cls, **overrides: object) -> GatewaySettings:
        env = os.environ
        values: dict[str, object] = {}
        if env.get("JIDO_GATEWAY_HOST"):
            values["host"] = env["JIDO_GATEWAY_HOST"]
        if env.get("JIDO_GATEWAY_PORT"):
            values["port"] = env["JIDO_GATEWAY_PORT"]
        if env.get("JIDO_GATEWAY_TOKEN"):
            values["token"] = env["JIDO_GATEWAY_TOKEN"]
        if env.get("JIDO_GATEWAY_CORS_ORIGINS"):
            values["cors_origins"] = tuple(
                o.strip() for o in env["JIDO_GATEWAY_CORS_ORIGINS"].split(",") if o.strip()
            )
        if env.get("JIDO_GATEWAY_PUBLIC_URL"):
            values["public_urls"] = tuple(
                u.strip() for u in env["JIDO_GATEWAY_PUBLIC_URL"].split(",") if u.strip()
            )
        if env.get("JIDO_GATEWAY_MAX_BODY"):
            values["max_body_bytes"] = env["JIDO_GATEWAY_MAX_BODY"]
        if env.get("JIDO_GATEWAY_SSE_QUEUE"):
            values["sse_queue"] = env["JIDO_GATEWAY_SSE_QUEUE"]
        values.update(overrides)
        return cls.model_validate(values)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
