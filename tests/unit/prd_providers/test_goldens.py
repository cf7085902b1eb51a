"""Golden files: recorded native output of each CLI (written from its documentation, see each
adapter's docstring) through its ``normalize`` and the sequencer, compared with the expected
normalized events and result in ``tests/golden/prd/<provider>/<case>.expected.json``.

``JIDO_UPDATE_GOLDENS=1`` rewrites the expectations from the current mapping (review the diff).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.prd.providers.sequence import replay

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "prd"
PROVIDERS = ("codex", "claude", "gemini")
#: How a recorded session's process ended (default: exit 0, no stderr).
ENDINGS: dict[tuple[str, str], dict[str, Any]] = {
    ("codex", "failure"): {"exit_code": 1, "stderr": "Error: exceeded retry limit, last status: 429\n"},
    ("claude", "failure"): {"exit_code": 1, "stderr": ""},
    ("gemini", "failure"): {"exit_code": 1, "stderr": "Error when talking to Gemini API\n"},
}


def _cases() -> list[tuple[str, str]]:
    return [
        (provider, path.name.removesuffix(".jsonl"))
        for provider in PROVIDERS
        if (GOLDEN / provider).is_dir()
        for path in sorted((GOLDEN / provider).glob("*.jsonl"))
    ]


def render(provider: str, case: str) -> dict[str, Any]:
    module = importlib.import_module(f"jidocode.services.prd.providers.{provider}")
    lines = (GOLDEN / provider / f"{case}.jsonl").read_text().splitlines()
    events, result = replay(provider, module.normalize, lines, **ENDINGS.get((provider, case), {}))
    return {
        "events": [e.model_dump(mode="json", exclude_defaults=True) for e in events],
        "result": result.model_dump(mode="json", exclude_defaults=True),
    }


@pytest.mark.parametrize(("provider", "case"), _cases())
def test_native_output_maps_to_the_expected_normalized_events(provider: str, case: str) -> None:
    got = render(provider, case)
    expected_path = GOLDEN / provider / f"{case}.expected.json"
    if os.environ.get("JIDO_UPDATE_GOLDENS") == "1":
        expected_path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    assert expected_path.exists(), f"no expectation for {provider}/{case}: run with JIDO_UPDATE_GOLDENS=1"
    assert got == json.loads(expected_path.read_text())


def test_every_provider_has_a_success_and_a_failure_session() -> None:
    cases = set(_cases())
    for provider in PROVIDERS:
        assert (provider, "session") in cases
        assert (provider, "failure") in cases


@pytest.mark.parametrize(("provider", "case"), _cases())
def test_a_golden_session_keeps_the_contract_order(provider: str, case: str) -> None:
    events = render(provider, case)["events"]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "iteration_started"
    assert kinds[-1] in ("iteration_finished", "error")
    assert sum(k in ("iteration_finished", "error") for k in kinds) == 1
    assert kinds.count("iteration_started") == 1
    started = [e["call_id"] for e in events if e["kind"] == "tool_started"]
    finished = [e["call_id"] for e in events if e["kind"] == "tool_finished"]
    assert sorted(started) == sorted(finished) and len(set(started)) == len(started)
