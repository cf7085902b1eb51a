"""What model calls cost, shown the same way by the CLI, the gateway's API and the console.

A call litellm has no price for is *unpriced*: its cost is not known, so neither is any
total that includes it. The rule (decision 0314), in one place:

- no unpriced call: the total is the sum of the prices, shown as :func:`usd` (``$0`` for
  nothing spent, ``$0.0123`` from a cent on, three significant digits below one:
  ``$0.000420``);
- any unpriced call: the total is unknown (``None``, ``null`` in JSON), shown as
  ``unknown (2 calls unpriced)``, or ``unknown ($0.0123 + 2 calls unpriced)`` when some
  calls had a price. Never ``$0``.

The console's ``timeline.js`` (``costText``) applies the same rule to the events it sums;
``tests/unit/shared/test_cost.py`` pins both against one table.
"""

from __future__ import annotations

__all__ = ["MAX_DECIMALS", "cost_text", "total_cost", "usd"]


#: The most decimals an amount is shown with (a hundredth of a millionth of a dollar).
MAX_DECIMALS = 10


def usd(amount: float) -> str:
    """An amount in dollars: ``$0``, four decimals from a cent on, three significant digits
    below one (``$0.00420``, ``$0.0000252``: a cheap model's call costs that little)."""
    if amount <= 0:
        return "$0"
    if amount >= 0.01:
        return f"${amount:.4f}"
    # the same float steps as console.js, so both sides pick the same number of decimals
    decimals, threshold = 5, 0.001
    while amount < threshold and decimals < MAX_DECIMALS:
        threshold /= 10
        decimals += 1
    return f"${amount:.{decimals}f}"


def total_cost(priced_usd: float, unpriced_calls: int) -> float | None:
    """The total in dollars, ``None`` (unknown) when any call had no price."""
    return None if unpriced_calls > 0 else priced_usd


def cost_text(priced_usd: float, unpriced_calls: int) -> str:
    """The total as a person reads it: an amount, or ``unknown (…)`` saying why."""
    if unpriced_calls <= 0:
        return usd(priced_usd)
    calls = f"{unpriced_calls} call{'' if unpriced_calls == 1 else 's'} unpriced"
    if priced_usd <= 0:
        return f"unknown ({calls})"
    return f"unknown ({usd(priced_usd)} + {calls})"
