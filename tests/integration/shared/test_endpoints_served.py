"""The running system serves the endpoint table: each row by the service it names, and nothing else."""

from __future__ import annotations

import json
from typing import Any

import nats

from jidocode.shared import subjects
from jidocode.shared.bus import gather
from jidocode.shared.config import Config
from jidocode.shared.endpoints import ENDPOINTS, endpoints_of


async def test_every_service_serves_exactly_its_rows_of_the_table(services: Config) -> None:
    nc = await nats.connect(services.nats_url)
    try:
        served: dict[str, set[tuple[str, str, str, str]]] = {}
        for name, micro_name in subjects.SERVICE_NAMES.items():
            replies: list[dict[str, Any]] = []
            for _ in range(5):  # scatter-gather is at most once: ask again if no answer came in time
                replies = [json.loads(m.data) for m in await gather(nc, subjects.srv("INFO", name))]
                if replies:
                    break
            assert [r["name"] for r in replies] == [micro_name]
            served[name] = {
                (e["name"], e["subject"], e["metadata"]["request_type"], e["metadata"]["reply_type"])
                for e in replies[0]["endpoints"]
            }
    finally:
        await nc.close()
    for name in subjects.SERVICE_NAMES:
        expected = {(e.verb, e.pattern(), e.request_type, e.reply_type) for e in endpoints_of(name)}
        assert served[name] == expected, name
    assert sum(len(v) for v in served.values()) == len(ENDPOINTS)
