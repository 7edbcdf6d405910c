"""The current graft over many dataset prompts: each prompt's top-5 hits against the independent
reference grafter, the summary's means, intervals and recovery against a direct computation,
and the refusals (positions that are no roles, unknown templates, bad counts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tiny_world
from exp_fixtures import RefGraft
from explore_fixtures import DONORS, LLAMA_GROUPS
from weightgraft.data.encode import encode_prompt
from weightgraft.explore import analyses
from weightgraft.explore.explore_error import ExploreError
from weightgraft.explore.grid import Cells

PROMPTS = tiny_world.make_prompts()
PROMPT = PROMPTS[2]


def _hits(reference, tokenizer, prompt) -> list[float]:
    """Recipient, each donor alone, and FFN of layers 1-2 from sft at the last token, by the reference."""
    enc = encode_prompt(tokenizer, prompt)
    ids, n = enc.scoring_ids, len(enc.scoring_ids)
    last = [i == n - 1 for i in range(n)]
    rows = [
        [],
        *([RefGraft([True] * n, "all", ["all"], d)] for d in DONORS),
        [RefGraft(last, [1, 2], LLAMA_GROUPS["FFN"], "sft")],
    ]
    out = []
    for grafts in rows:
        logits = reference.logits(torch.tensor([ids]), grafts=grafts)[0, -1]
        out.append(float((logits.topk(5).indices == enc.scored_id).any()))
    return out


def test_many_prompts_equal_the_reference_prompt_by_prompt(session, reference):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    n = len(encoded.input_ids)
    cells = [Cells("sft", "FFN", 1, (n - 1,)), Cells("sft", "FFN", 2, (n - 1,))]
    out = analyses.many_prompts(session, encoded, cells, count=len(PROMPTS))
    assert out["positions"] == ["LT"] and out["prompts"] == len(PROMPTS) and out["skipped"] == {}
    hits = np.array([_hits(reference, session.tokenizer, p) for p in PROMPTS])
    assert hits[:, 1].mean() > hits[:, 0].mean()  # the donor knows facts the recipient does not
    names = [c["name"] for c in out["columns"]]
    assert names == ["recipient", *DONORS, "graft"]
    for k, column in enumerate(out["columns"]):
        assert column["top5"] == pytest.approx(hits[:, k].mean()), column["name"]
        assert column["low"] <= column["top5"] + 1e-12 and column["top5"] <= column["high"] + 1e-12
    assert out["facts"] == len({p.fact_id for p in PROMPTS})
    base, graft = hits[:, 0].mean(), hits[:, -1].mean()
    assert list(out["columns"][-1]["recovery"]) == ["sft"]  # the graft is from sft only
    for k, donor in enumerate(DONORS[:1], start=1):
        rec = out["columns"][-1]["recovery"][donor]
        full = hits[:, k].mean()
        if rec["value"] is not None:
            assert rec["value"] == pytest.approx((graft - base) / (full - base))
            assert rec["low"] <= rec["value"] <= rec["high"]
        else:
            assert "includes 0" in rec["reason"] or full == base


def test_a_template_and_a_count_choose_the_prompts(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = analyses.many_prompts(session, encoded, [], count=50, template="paper_1")
    assert out["prompts"] == sum(p.template_id == "paper_1" for p in PROMPTS) and out["positions"] == []
    assert analyses.many_prompts(session, encoded, [], count=5)["prompts"] == 5
    with pytest.raises(ExploreError, match="unknown template"):
        analyses.many_prompts(session, encoded, [], template="nope")
    with pytest.raises(ExploreError, match="count must be"):
        analyses.many_prompts(session, encoded, [], count=0)


def test_positions_that_are_no_roles_are_refused(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    # the first token alone is part of FE, not a whole role
    fe = encoded.role_positions["first_entity"]
    assert len(fe) > 1
    with pytest.raises(ExploreError, match="not a union of this prompt's roles"):
        analyses.many_prompts(session, encoded, [Cells("sft", "O", 0, (fe[0],))])


def test_repeated_requests_run_only_the_grafts_row(root, reference, monkeypatch):
    """Before: every request ran the recipient's and each donor's row of every prompt again."""
    from explore_fixtures import open_world_session

    session = open_world_session(root)  # a session of its own: no rows kept from other tests
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    n = len(encoded.input_ids)
    rows_run: list[int] = []
    logits = session.grafter.logits

    def counting(ids, **kwargs):
        rows_run.append(ids.shape[0])
        return logits(ids, **kwargs)

    monkeypatch.setattr(session.grafter, "logits", counting)
    cells = [Cells("sft", "FFN", 1, (n - 1,)), Cells("sft", "FFN", 2, (n - 1,))]
    first = analyses.many_prompts(session, encoded, cells, count=len(PROMPTS))
    assert sum(rows_run) == len(PROMPTS) * (2 + len(DONORS))
    rows_run.clear()
    again = analyses.many_prompts(session, encoded, cells, count=len(PROMPTS))
    assert again == first and sum(rows_run) == len(PROMPTS)  # the graft's row alone
    rows_run.clear()
    other = analyses.many_prompts(session, encoded, [Cells("task", "O", 3, (n - 1,))], count=len(PROMPTS))
    assert sum(rows_run) == len(PROMPTS)
    hits = np.array([_hits(reference, session.tokenizer, p) for p in PROMPTS])
    for k, column in enumerate(other["columns"][:-1]):  # the kept rows are the recipient's and donors'
        assert column["top5"] == pytest.approx(hits[:, k].mean())
    rows_run.clear()
    assert analyses.many_prompts(session, encoded, [], count=len(PROMPTS))["prompts"] == len(PROMPTS)
    assert rows_run == []  # nothing grafted: the recipient's kept hits are the graft's
