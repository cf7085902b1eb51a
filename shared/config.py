"""Process configuration read from the environment, validated at construction.

=====================  =====================================================
variable               meaning
=====================  =====================================================
``NATS_URL``           the NATS server(s) to use; unset means "embedded"
``NATS_USER``/``NATS_PASSWORD``  credentials of this service's NATS user
``NATS_CREDS``         a NATS ``.creds`` file (nkey/JWT), instead of a password
``JIDO_CODE_HOME``     the global layer, default ``~/.jido_code``
``JIDO_DATA_HOME``     where ``jidocode up`` keeps the embedded JetStream store
``JIDO_JS_REPLICAS``   replicas of streams and KV buckets (default: 1, or 3 on a cluster)
``JIDO_INSTANCE``      this replica's name (default ``<host>-<pid>``)
=====================  =====================================================
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_NATS_URL", "Config", "default_data_home", "default_jido_home"]

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def default_jido_home() -> Path:
    env = os.environ.get("JIDO_CODE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".jido_code"


def default_data_home() -> Path:
    env = os.environ.get("JIDO_DATA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "jidocode"


class Config(BaseModel):
    """Settings shared by every service process."""

    model_config = ConfigDict(frozen=True)

    nats_url: str = DEFAULT_NATS_URL
    nats_user: str | None = None
    nats_password: str | None = None
    nats_creds: str | None = None
    jido_home: Path = Field(default_factory=default_jido_home)
    js_replicas: int | None = Field(default=None, ge=1, le=5)
    instance: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    @classmethod
    def from_env(cls, **overrides: object) -> Config:
        env = os.environ
        values: dict[str, object] = {
            "nats_url": env.get("NATS_URL") or DEFAULT_NATS_URL,
            "nats_user": env.get("NATS_USER") or None,
            "nats_password": env.get("NATS_PASSWORD") or None,
            "nats_creds": env.get("NATS_CREDS") or None,
            "jido_home": default_jido_home(),
        }
        if env.get("JIDO_JS_REPLICAS"):
            values["js_replicas"] = int(env["JIDO_JS_REPLICAS"])
        if env.get("JIDO_INSTANCE"):
            values["instance"] = env["JIDO_INSTANCE"]
        values.update(overrides)
        return cls.model_validate(values)
