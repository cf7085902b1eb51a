"""System prompt and token ledger cores."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.conversation.llm.ledger import MemoryLedger, accumulate, check_budget
from jidocode.services.conversation.llm.prompt import (
    MAX_FILE_CHARS,
    MAX_INDEX_ENTRIES,
    AssetEntry,
    Instruction,
    PromptInputs,
    build_system_prompt,
    parse_asset_index,
    read_instructions,
)
from jidocode.shared.events.llm import LlmCallCompleted, UsageTotals
from jidocode.shared.ledger import combine


def _usage(p: str = "p", c: str = "c", tokens: int = 10, cost: float | None = 0.5) -> LlmCallCompleted:
    return LlmCallCompleted(
        project_id=p,
        conversation_id=c,
        call_id="k",
        model="m",
        prompt_tokens=tokens - 2,
        completion_tokens=2,
        total_tokens=tokens,
        cost_usd=cost,
        context_window=1000,
    )


# --- prompt --------------------------------------------------------------------


def test_prompt_has_root_policy_instructions_and_index() -> None:
    text = build_system_prompt(
        PromptInputs(
            root="/work/proj",
            instructions=(Instruction(source="the project's JIDO.md", text="Use tabs."),),
            permissions={"allow": ["Read", "Bash(git:*)"], "ask": ["Edit(src/**)"], "deny": ["Bash(rm:*)"]},
            assets=(
                AssetEntry(kind="skill", name="testing", description="How to run the tests"),
                AssetEntry(kind="command", name="review", description="Review a diff"),
            ),
        )
    )
    assert "Project root: /work/proj" in text
    assert "Denied: Bash(rm:*)" in text
    assert "Needs the user's approval: Edit(src/**)" in text
    assert "Use tabs." in text
    assert "- testing: How to run the tests" in text
    assert "- review: Review a diff" in text
    assert "load_skill" in text


def test_prompt_is_deterministic_and_index_is_capped() -> None:
    many = tuple(AssetEntry(kind="skill", name=f"s{i:04d}", description="x" * 1000) for i in range(500))
    inputs = PromptInputs(root="/r", assets=many)
    text = build_system_prompt(inputs)
    assert text == build_system_prompt(inputs)
    assert text.count("\n- s") == MAX_INDEX_ENTRIES
    assert f"{500 - MAX_INDEX_ENTRIES} more not listed" in text
    assert "x" * 300 not in text


def test_prompt_says_when_the_index_is_missing() -> None:
    text = build_system_prompt(PromptInputs(root="/r", assets_note="(the asset loader did not answer)"))
    assert "did not answer" in text


def test_read_instructions_reads_every_layer_once_and_caps(tmp_path: Path) -> None:
    home = tmp_path / "home"
    root = tmp_path / "proj"
    (home).mkdir()
    (root / ".jido").mkdir(parents=True)
    (home / "JIDO.md").write_text("global rules")
    (root / ".jido" / "JIDO.md").write_text("project rules")
    (root / "AGENTS.md").write_text("a" * (MAX_FILE_CHARS + 50))
    (root / "CLAUDE.md").symlink_to(root / "AGENTS.md")
    got = read_instructions(root, jido_home=home)
    assert [i.source for i in got] == [
        "the global JIDO.md",
        "the project's .jido/JIDO.md",
        "the project's AGENTS.md",
    ]
    assert got[2].text.endswith(f"[… truncated at {MAX_FILE_CHARS} characters]")


def test_read_instructions_without_files(tmp_path: Path) -> None:
    assert read_instructions(tmp_path, jido_home=tmp_path / "none") == ()


def test_parse_asset_index_accepts_both_shapes() -> None:
    flat = [
        {"kind": "skill", "name": "a", "description": "A"},
        {"type": "commands", "name": "b"},
        {"kind": "nonsense", "name": "c"},
        {"kind": "skill"},
        "junk",
    ]
    assert parse_asset_index(flat) == (
        AssetEntry(kind="skill", name="a", description="A"),
        AssetEntry(kind="command", name="b"),
    )
    grouped = {"skills": [{"name": "a", "description": "A"}], "workflows": [{"name": "w"}], "diagnostics": []}
    assert parse_asset_index(grouped) == (
        AssetEntry(kind="skill", name="a", description="A"),
        AssetEntry(kind="workflow", name="w"),
    )
    assert parse_asset_index({"items": flat[:1]}) == (AssetEntry(kind="skill", name="a", description="A"),)
    assert parse_asset_index(None) == ()


# --- ledger ----------------------------------------------------------------------


def test_accumulate_sums_and_tracks_context() -> None:
    t = accumulate(UsageTotals(), _usage(tokens=10, cost=0.5))
    t = accumulate(t, _usage(tokens=30, cost=None))
    assert (t.calls, t.total_tokens, t.cost_usd, t.unpriced_calls) == (2, 40, 0.5, 1)
    assert (t.context_tokens, t.context_window) == (30, 1000)
    assert (t.project_id, t.conversation_id) == ("p", "c")


@given(st.lists(st.tuples(st.integers(0, 10_000), st.one_of(st.none(), st.floats(0, 10))), max_size=30))
def test_combine_equals_folding_everything(calls: list[tuple[int, float | None]]) -> None:
    per_conv: dict[str, UsageTotals] = {}
    everything = UsageTotals()
    for n, (tokens, cost) in enumerate(calls):
        ev = _usage(c=f"c{n % 3}", tokens=tokens + 2, cost=cost)
        per_conv[ev.conversation_id] = accumulate(per_conv.get(ev.conversation_id) or UsageTotals(), ev)
        everything = accumulate(everything, ev)
    total = combine("p", per_conv.values())
    assert total.calls == everything.calls
    assert total.total_tokens == everything.total_tokens
    assert abs(total.cost_usd - everything.cost_usd) < 1e-6
    assert total.unpriced_calls == everything.unpriced_calls


def test_budget() -> None:
    t = accumulate(UsageTotals(), _usage(tokens=100, cost=1.0))
    assert check_budget(t, budget_tokens=None, budget_usd=None) is None
    assert check_budget(t, budget_tokens=101, budget_usd=2.0) is None
    hit = check_budget(t, budget_tokens=100, budget_usd=None)
    assert hit is not None and hit.used_tokens == 100 and hit.budget_tokens == 100
    hit = check_budget(t, budget_tokens=None, budget_usd=0.5)
    assert hit is not None and hit.used_usd == 1.0


async def test_memory_ledger() -> None:
    ledger = MemoryLedger()
    await ledger.record(_usage(c="a", tokens=10))
    await ledger.record(_usage(c="b", tokens=20))
    await ledger.record(_usage(p="other", c="a", tokens=99))
    assert (await ledger.conversation("p", "a")).total_tokens == 10
    assert (await ledger.conversation("p", "zzz")).calls == 0
    assert (await ledger.project("p")).total_tokens == 30
