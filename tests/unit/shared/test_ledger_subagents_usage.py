"""A conversation's ``usage`` with its finished sub-agents' totals added (decision 0315)."""

from __future__ import annotations

from jidocode.shared.events.llm import UsageTotals
from jidocode.shared.ledger import with_subagents_usage

OWN = {
    "calls": 2,
    "prompt_tokens": 20,
    "completion_tokens": 10,
    "cached_tokens": 4,
    "total_tokens": 30,
    "cost_usd": 0.25,
    "unpriced_calls": 0,
    "model": "openai/parent",
    "context_tokens": 15,
    "context_window": 8000,
}


def _child(**kw: object) -> UsageTotals:
    return UsageTotals.model_validate({"project_id": "p", **kw})


def test_sums_add_up_and_the_last_call_stays_the_parents() -> None:
    children = [
        _child(
            calls=1, prompt_tokens=1000, completion_tokens=100, total_tokens=1100, cost_usd=0.5, model="m1"
        ),
        _child(
            calls=3, prompt_tokens=5, completion_tokens=5, cached_tokens=2, total_tokens=10, unpriced_calls=3
        ),
    ]
    out = with_subagents_usage(OWN, children)
    assert (out["calls"], out["prompt_tokens"], out["completion_tokens"]) == (6, 1025, 115)
    assert (out["cached_tokens"], out["total_tokens"], out["unpriced_calls"]) == (6, 1140, 3)
    assert out["cost_usd"] == 0.75
    assert (out["model"], out["context_tokens"], out["context_window"]) == ("openai/parent", 15, 8000)
    assert set(out) == set(OWN)  # the projection's shape, nothing added
    assert OWN["calls"] == 2  # the input is left alone


def test_no_children_changes_nothing_and_an_unknown_cost_stays_unknown() -> None:
    assert with_subagents_usage(OWN, []) == OWN
    unknown = with_subagents_usage({**OWN, "cost_usd": None}, [_child(calls=1, cost_usd=0.5)])
    assert unknown["cost_usd"] is None and unknown["calls"] == 3
