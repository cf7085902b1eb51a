"""The SDK's answer to an approval with a form: checked before it is sent (pure)."""

from __future__ import annotations

import pytest

from jidocode.client import ApprovalAnswer, ApprovalRequest
from jidocode.client._callbacks import approval_response, response_of
from jidocode.shared.errors import InvalidInput

FORM = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
ASKED = ApprovalRequest(request_id="r1/elicitation-1", tool="mcp__s__t", args={}, form=FORM)


def test_content_that_fits_goes_with_the_answer() -> None:
    response = approval_response(ASKED, ApprovalAnswer(content={"count": 2}))
    assert (response.decision, response.content) == ("approve_once", {"count": 2})


@pytest.mark.parametrize(
    ("request_", "answer", "message"),
    [
        (ASKED, ApprovalAnswer(content={"count": "2"}), "field 'count': expected an integer"),
        (ASKED, ApprovalAnswer(decision="deny", content={"count": 2}), "asks none"),
        (ASKED.model_copy(update={"form": None}), ApprovalAnswer(content={"count": 2}), "asks none"),
    ],
)
def test_content_that_does_not_fit_is_refused_before_it_is_sent(
    request_: ApprovalRequest, answer: ApprovalAnswer, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        approval_response(request_, answer)
    assert message in caught.value.message


async def test_a_callback_giving_content_that_does_not_fit_denies() -> None:
    response = await response_of(lambda _: ApprovalAnswer(content={"count": 1.5}), ASKED)
    assert (response.decision, response.content) == ("deny", None)
    assert (await response_of(lambda _: True, ASKED)).decision == "approve_once"
