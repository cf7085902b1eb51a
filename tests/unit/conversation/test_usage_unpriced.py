"""The ``usage`` projection counts the calls without a price (their total is unknown, not $0)."""

from __future__ import annotations

import pytest

from jidocode.services.conversation.core import initial_state, project, run_to_idle

from ._helpers import llm_done, user


def test_a_call_without_a_price_is_counted_as_unpriced() -> None:
    state, _ = run_to_idle(initial_state("p", "c"), [user()])
    priced = llm_done(state, "")
    state, _ = run_to_idle(state, [priced])
    state, _ = run_to_idle(state, [user(id="u2")])
    unpriced = llm_done(state, "fin")
    usage = {k: v for k, v in unpriced.data["usage"].items() if k != "cost_usd"}  # litellm: no price
    state, _ = run_to_idle(state, [unpriced.model_copy(update={"data": {**unpriced.data, "usage": usage}})])
    state, _ = run_to_idle(state, [user(id="u3")])
    none = llm_done(state, "again")
    state, _ = run_to_idle(
        state, [none.model_copy(update={"data": {**none.data, "usage": {**usage, "cost_usd": None}}})]
    )
    used = project(state, "usage")
    assert used["calls"] == 3
    assert used["unpriced_calls"] == 2
    assert used["cost_usd"] == pytest.approx(0.001)
