"""One rule for a cost, in Python (CLI, API) and in the console's script: pinned by one table."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jidocode.shared.cost import cost_text, total_cost, usd

CONSOLE_JS = Path(__file__).parents[3] / "services" / "gateway" / "console" / "static" / "console.js"

#: (priced dollars, unpriced calls) → what every surface shows.
TABLE = [
    (0.0, 0, "$0"),
    (0.0123456, 0, "$0.0123"),
    (1.5, 0, "$1.5000"),
    (0.00042, 0, "$0.000420"),
    (0.005, 0, "$0.00500"),
    (0.0000252, 0, "$0.0000252"),
    (1e-12, 0, "$0.0000000000"),
    (0.0, 1, "unknown (1 call unpriced)"),
    (0.0, 3, "unknown (3 calls unpriced)"),
    (0.0123456, 2, "unknown ($0.0123 + 2 calls unpriced)"),
    (0.00042, 1, "unknown ($0.000420 + 1 call unpriced)"),
]


@pytest.mark.parametrize(("priced", "unpriced", "shown"), TABLE)
def test_the_cost_is_shown_by_one_rule(priced: float, unpriced: int, shown: str) -> None:
    assert cost_text(priced, unpriced) == shown


def test_an_unpriced_call_makes_the_total_unknown() -> None:
    assert total_cost(0.5, 0) == 0.5
    assert total_cost(0.5, 1) is None
    assert total_cost(0.0, 2) is None


def test_nothing_spent_is_zero_dollars() -> None:
    assert usd(0.0) == "$0"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the console's script")
def test_the_console_shows_the_same_text() -> None:
    """``Jido.costText`` of console.js, run by node on the same table."""
    script = (
        CONSOLE_JS.read_text()
        + "\nconst rows = JSON.parse(process.argv[1]);"
        + "\nconsole.log(JSON.stringify(rows.map(([p, u]) => Jido.costText(p, u))));"
    )
    rows = json.dumps([[priced, unpriced] for priced, unpriced, _ in TABLE])
    done = subprocess.run(
        ["node", "-e", script, rows], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [shown for _, _, shown in TABLE]
