"""`jidocode contract asyncapi`: the bus contract, generated from the event catalogue.

``docs/asyncapi.yaml`` is this command's output; a test fails when it is stale.
Regenerate it with ``jidocode contract asyncapi > docs/asyncapi.yaml``.
"""

from __future__ import annotations

import json

import typer

app = typer.Typer(rich_markup_mode=None, help="The published contract of the bus.", no_args_is_help=True)


@app.command("asyncapi")
def asyncapi(
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of YAML"),
) -> None:
    """Print the AsyncAPI 3.0 document of every channel, message and request/reply pair."""
    from jidocode.shared.contract import build_asyncapi, to_yaml  # every model's schema: 0.2 s

    document = build_asyncapi()
    if as_json:
        typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        typer.echo(to_yaml(document), nl=False)
