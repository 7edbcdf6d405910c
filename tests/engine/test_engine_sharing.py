"""Prefix sharing: rows that agree up to a position compute that stretch once, with equal results."""

from __future__ import annotations

import torch

from tiny_model_fixtures import make_pair
from weightgraft import Graft, Grafter
from weightgraft.engine.sharing import plan_segments

# fp32 rounding: a shared prefix is computed once and the rows go on against its KV cache, so the
# attention sums run over other shapes than a full forward of each row (measured: <= 1.7e-6).
SHARING_ATOL = 1e-5


def _grafter() -> Grafter:
    return Grafter(*make_pair("gpt2", vocab_size=71, n_layer=4))


def _row_tokens_computed(grafter: Grafter, fn) -> int:
    """Rows x tokens that pass through the first block, over every forward a call makes."""
    seen = []
    block = grafter.adapter.decoder_layers(grafter.recipient)[0]
    handle = block.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0] * args[0].shape[1]))
    try:
        result = fn()
    finally:
        handle.remove()
    return sum(seen), result


def test_position_sweep_shares_and_equals_running_every_row_in_full():
    grafter = _grafter()
    torch.manual_seed(0)
    prompts = torch.randint(0, 71, (3, 12))
    fe, lt = [2, 3], [-1]
    conditions = [None, Graft(lt), Graft(fe), Graft(fe + lt), Graft(components="all"), Graft([5], "last_half", "mlp")]
    ids = prompts.repeat_interleave(len(conditions), dim=0)
    row_grafts = conditions * len(prompts)
    shared_cost, shared = _row_tokens_computed(grafter, lambda: grafter.logits(ids, row_grafts=row_grafts))
    grafter.share_prefixes = False
    full_cost, full = _row_tokens_computed(grafter, lambda: grafter.logits(ids, row_grafts=row_grafts))
    assert full_cost == ids.numel()
    assert shared_cost < 0.8 * full_cost
    assert (shared - full).abs().max().item() < SHARING_ATOL


def test_last_token_sweep_costs_about_one_prompt_plus_one_token_per_condition():
    grafter = _grafter()
    torch.manual_seed(1)
    prompt = torch.randint(0, 71, (1, 16))
    conditions = [Graft("last", "last_half", c) for c in (["o"], ["mlp"], ["o", "mlp"], ["q", "k", "v"])]
    ids = prompt.repeat(len(conditions), 1)
    cost, last = _row_tokens_computed(grafter, lambda: grafter.last_logits(ids, row_grafts=conditions))
    assert cost == 15 + len(conditions)
    for row, graft in enumerate(conditions):
        alone = grafter.last_logits(prompt, grafts=graft)
        assert (last[row] - alone[0]).abs().max().item() < SHARING_ATOL


def test_planner_cuts_only_where_histories_split():
    ids = torch.zeros(3, 10, dtype=torch.long)
    mask = torch.ones_like(ids)
    grafts = torch.zeros(2, 3, 10, dtype=torch.bool)
    grafts[0, 1, 9] = True  # row 1 differs from row 0 at the last token
    grafts[1, 2, 4:] = True  # row 2 differs from position 4 on
    segments = plan_segments(ids, mask, grafts)
    assert [(s.start, s.end) for s in segments] == [(0, 4), (4, 9), (9, 10)]
    assert [len(s.rows) for s in segments] == [1, 2, 3]
    assert segments[2].row_to_history.tolist() == [0, 1, 2]


def test_rows_that_differ_from_the_first_token_are_not_planned():
    ids = torch.arange(12).reshape(3, 4)
    assert plan_segments(ids, torch.ones_like(ids), torch.zeros(2, 3, 4, dtype=torch.bool)) is None


def test_share_prefixes_is_a_constructor_argument_and_an_attribute():
    grafter = _grafter()
    off = Grafter(grafter.recipient, grafter.donors["donor"].model, share_prefixes=False)
    assert grafter.share_prefixes and not off.share_prefixes
    prompt = torch.randint(0, 71, (1, 10))
    conditions = [Graft("last", "all", c) for c in ("o", "mlp", "attn")]
    ids = prompt.repeat(len(conditions), 1)
    cost_off, _ = _row_tokens_computed(off, lambda: off.last_logits(ids, row_grafts=conditions))
    assert cost_off == ids.numel()
    off.share_prefixes = True
    cost_on, _ = _row_tokens_computed(off, lambda: off.last_logits(ids, row_grafts=conditions))
    assert cost_on == 9 + len(conditions)


def test_the_graft_cache_forgets_grafts_that_are_gone():
    import gc

    grafter = _grafter()
    ids = torch.randint(0, 71, (1, 6))
    kept = Graft("last", "all", "mlp")
    for layer in range(4):
        grafter.logits(ids, grafts=[kept, Graft(0, layer, "o")])
    gc.collect()
    assert list(grafter._graft_keys.keys()) == [kept]


def test_row_indices_are_found_once_per_call_not_once_per_hooked_module(monkeypatch):
    """The hooks only index: how often masks are searched (nonzero) does not grow with depth."""

    def searches(n_layer: int) -> int:
        grafter = Grafter(*make_pair("gpt2", vocab_size=71, n_layer=n_layer))
        ids = torch.randint(0, 71, (3, 8))
        grafts = [Graft("last", "all", "all"), Graft([1, 2], "all", ["q", "mlp"])]
        count = 0
        original = torch.Tensor.nonzero

        def counting(self, *args, **kwargs):
            nonlocal count
            count += 1
            return original(self, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(torch.Tensor, "nonzero", counting)
            grafter.logits(ids, grafts=grafts)
        return count

    assert searches(2) == searches(8)
