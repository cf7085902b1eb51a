"""`jidocode status` fits 80 columns without cutting a name (issue 13: it was unreadable)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from jidocode.cli.status import status_table


def _service(name: str, instance: str, endpoints: list[str]) -> dict[str, Any]:
    return {
        "name": f"jidocode-{name.replace('_', '-')}",
        "id": "x",
        "version": "0.1.0",
        "metadata": {"instance": f"{name}/{instance}"},
        "endpoints": [
            {
                "name": e,
                "subject": f"jido.{name}.*.{e}",
                "num_requests": 12345,
                "average_processing_time": 2_500_000,
            }
            for e in endpoints
        ],
    }


FOUND = [
    _service("asset_loader", "asset_loader-27984", ["get", "diagnostics", "call_tool"]),
    _service("conversation", "c0ffee1234ab-4242", ["start", "get_projection"]),
    _service("engine", "engine-27984", ["whereis_project"]),
]


def test_fits_80_columns_and_keeps_every_name_whole() -> None:
    console = Console(width=80, record=True, color_system=None)
    console.print(status_table(FOUND))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for word in (
        "asset-loader",
        "asset_loader-27984",
        "c0ffee1234ab-4242",
        "get_projection",
        "whereis_project",
    ):
        assert word in text
    assert "12345" in text and "2.50 ms" in text
    assert "errors" not in text  # nats.micro counts no error our middleware answers: no column of zeros
