"""Graft attribution against independent computations on tiny models of every architecture.

The finite-difference reference below is a hook of its own (not the attribution code): it moves
one module's output at one position a small step eps toward the donor module's output on the same
input, restricted to the component's own output columns, and measures the metric.
"""

from __future__ import annotations

import pytest
import torch

from tiny_model_fixtures import ARCHS, make_pair
from weightgraft import Graft, Grafter
from weightgraft.adapters.base import Part
from weightgraft.attribution import attribute

SEQ = 7


def _pair64(arch: str):
    recipient, donor = make_pair(arch)
    return recipient.double(), donor.double()


def _module_and_columns(grafter: Grafter, layer, component: str):
    adapter = grafter.adapter
    if layer is None:
        return adapter.model_level[component], None, 1
    ref = adapter.per_layer[component]
    local = ref.module if isinstance(ref, Part) else ref
    columns = adapter.splits[ref.module](grafter.recipient.config)[ref.part] if isinstance(ref, Part) else None
    return f"{adapter.layers}.{layer}.{local}", columns, adapter.seq_dims.get(local, 1)


def _logprob_with_nudge(grafter, ids, mask, target, path, columns, seq_dim, row, tensor_pos, eps):
    """log p(target) at the last real token, with output <- output + eps*(donor - output) at one
    (row, position) of one module (only `columns`, if given)."""
    recipient, donor_module = grafter.recipient, grafter.donors["donor"].model.get_submodule(path)

    def hook(module, args, kwargs, output):
        x = args[0] if args else next(iter(kwargs.values()))
        delta = donor_module(x) - output
        out, delta = output.movedim(seq_dim, 1).clone(), delta.movedim(seq_dim, 1)
        if columns is None:
            out[row, tensor_pos] += eps * delta[row, tensor_pos]
        else:
            out[row, tensor_pos, ..., columns] += eps * delta[row, tensor_pos, ..., columns]
        return out.movedim(1, seq_dim)

    handle = recipient.get_submodule(path).register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = recipient(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    finally:
        handle.remove()
    last = int(mask[row].nonzero().max())
    return float(torch.log_softmax(logits[row, last], -1)[target])


def _some_cells(grafter, length: int, generator: torch.Generator) -> list[tuple]:
    """A few (layer, component, real position) cells: every model-level component, and per-layer
    components at random layers, including every fused part."""
    cells = [(None, c, int(torch.randint(length, (1,), generator=generator))) for c in grafter.adapter.model_level]
    for comp in grafter.adapter.per_layer:
        layer = int(torch.randint(grafter.num_layers, (1,), generator=generator))
        cells.append((layer, comp, int(torch.randint(length, (1,), generator=generator))))
    cells.append((None, "lm_head", length - 1))  # the unembedding matters only at the last token
    return cells


@pytest.mark.parametrize("arch", ARCHS)
def test_gradient_matches_finite_difference_of_the_cell_graft(arch):
    recipient, donor = _pair64(arch)
    grafter = Grafter(recipient, donor)
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 150, (2, SEQ), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # row 1 is padded (right: some float64 eager attentions give NaN on left pads)
    targets = [17, 42]
    attr = attribute(grafter, ids, targets, attention_mask=mask)
    # Some eager attentions take their softmax in float32 even in a float64 model, so the
    # metric is only float32-exact: eps=1e-3 keeps that noise (~1e-7/eps) and the central
    # difference's own error (~eps^2) both near 1e-4. Hence abs=3e-4 (rel=1e-3 for the large
    # gradients); measured: at most 1.8e-4 off over all architectures.
    eps = 1e-3
    checked = 0
    for row, offset, length in ((0, 0, SEQ), (1, 0, SEQ - 2)):
        cells = _some_cells(grafter, length, generator)
        for layer, comp, pos in cells if row == 0 else cells[:2] + cells[-3:]:
            path, columns, seq_dim = _module_and_columns(grafter, layer, comp)
            args = (grafter, ids, mask, targets[row], path, columns, seq_dim, row, pos + offset)
            finite = (_logprob_with_nudge(*args, eps) - _logprob_with_nudge(*args, -eps)) / (2 * eps)
            if layer is None:
                got = float(attr.model_level[row, pos, attr.model_components.index(comp)])
            else:
                got = float(attr.cells[row, pos, layer, attr.layer_components.index(comp)])
            assert got == pytest.approx(finite, rel=1e-3, abs=3e-4), (row, layer, comp, pos)
            checked += 1
    assert checked == len(grafter.adapter.model_level) + len(grafter.adapter.per_layer) + 1 + 5


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "phi3", "gemma3_text"])
def test_the_reference_nudge_at_eps_1_is_the_engines_exact_cell_graft(arch):
    """The finite-difference hook at eps=1 grafts the cell fully: it must agree with the engine."""
    recipient, donor = _pair64(arch)
    grafter = Grafter(recipient, donor)
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(1, 150, (1, SEQ), generator=generator)
    mask = torch.ones_like(ids)
    for layer, comp, pos in _some_cells(grafter, SEQ, generator):
        path, columns, seq_dim = _module_and_columns(grafter, layer, comp)
        ours = _logprob_with_nudge(grafter, ids, mask, 9, path, columns, seq_dim, 0, pos, 1.0)
        graft = Graft(positions=[pos], layers=[0 if layer is None else layer], components=[comp])
        engine = float(torch.log_softmax(grafter.last_logits(ids, grafts=graft), -1)[0, 9])
        # float64, the same graft by two routes (a hook's out + 1 * (donor - out), the engine's
        # splice): they differ by float64 rounding only (measured <= 9e-16).
        assert ours == pytest.approx(engine, abs=1e-9), (layer, comp, pos)


# Integrated attributions sum to metric(donor) - metric(recipient) up to the midpoint rule's error,
# which falls as 1/steps^2. Stated tolerance, on these tiny random pairs (far apart, so the path
# bends more than between a model and its finetune): at 16 steps |gap| <= 2% of the summed
# |attributions| (measured: <= 0.08 nats on totals up to 3.7 nats); at 48 steps |gap| <= 0.01 nats.
@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "llama", "gemma2", "olmo2", "phi3"])
def test_integrated_attributions_sum_to_the_exact_total_effect(arch):
    recipient, donor = _pair64(arch)
    grafter = Grafter(recipient, donor)
    ids = torch.randint(1, 150, (2, SEQ), generator=torch.Generator().manual_seed(11))
    targets = torch.tensor([3, 77])
    with torch.no_grad():  # the exact total, computed without the attribution code
        exact = (
            torch.log_softmax(donor(input_ids=ids).logits[:, -1], -1)
            - torch.log_softmax(recipient(input_ids=ids).logits[:, -1], -1)
        )[[0, 1], targets]
        everywhere = torch.log_softmax(grafter.last_logits(ids, grafts=Graft()), -1)[[0, 1], targets]
        base = torch.log_softmax(grafter.last_logits(ids), -1)[[0, 1], targets]
    # float64 default tolerances (rtol 1e-7, atol 1e-7): the same logits by other routes
    # (engine with every cell grafted vs the donor's own forward; measured <= 3e-15).
    torch.testing.assert_close(everywhere - base, exact)
    coarse = attribute(grafter, ids, targets, method="integrated", steps=16)
    fine = attribute(grafter, ids, targets, method="integrated", steps=48)
    torch.testing.assert_close(fine.exact_total, exact)
    torch.testing.assert_close(fine.completeness_gap, fine.total - exact)
    coarse_gap, fine_gap = (coarse.total - exact).abs(), (fine.total - exact).abs()
    magnitude = coarse.cells.abs().sum((1, 2, 3)) + coarse.model_level.abs().sum((1, 2))
    assert bool((coarse_gap <= 0.02 * magnitude).all()), (coarse.total, exact)
    assert bool((fine_gap <= 0.01).all()), (fine.total, exact)
    assert float(fine_gap.sum()) < float(coarse_gap.sum()) / 4


@pytest.mark.parametrize("method", ["gradient", "integrated"])
@pytest.mark.parametrize("arch", ["gpt2", "llama", "gemma3_text"])
def test_batched_equals_row_by_row(arch, method):
    recipient, donor = make_pair(arch)  # float32: HF's float64 masks turn left pads into NaN
    grafter = Grafter(recipient, donor)
    generator = torch.Generator().manual_seed(2)
    rows = [torch.randint(1, 150, (n,), generator=generator).tolist() for n in (6, 3, 8)]
    targets = [5, 6, 7]
    width = max(map(len, rows))
    for side in ("right", "left"):
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, row in enumerate(rows):
            span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
            ids[b, span], mask[b, span] = torch.tensor(row), 1
        batched = attribute(grafter, ids, targets, attention_mask=mask, method=method, steps=3)
        assert batched.lengths == [6, 3, 8]
        for b, row in enumerate(rows):
            alone = attribute(grafter, torch.tensor([row]), [targets[b]], method=method, steps=3)
            n = len(row)
            # float32 gradients of a padded batch vs one unpadded row: the same math over other
            # shapes, rounded differently (measured: <= 1.9e-6 absolute; relative up to 6e-4 only
            # on cells near 0, which atol covers).
            torch.testing.assert_close(batched.cells[b, :n], alone.cells[0], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(batched.model_level[b, :n], alone.model_level[0], rtol=1e-4, atol=1e-5)
            assert bool((batched.cells[b, n:] == 0).all())
            # float32 default tolerances (atol 1e-5): a forward only (measured <= 1e-6)
            torch.testing.assert_close(batched.metric_donor[b], alone.metric_donor[0])


def test_attribution_never_writes_into_either_model():
    recipient, donor = make_pair("phi3")
    recipient.train()  # a mode the call must give back
    grafter = Grafter(recipient, donor)
    before = {
        name: (p.detach().clone(), q.detach().clone())
        for (name, p), (_, q) in zip(recipient.named_parameters(), donor.named_parameters())
    }
    ids = torch.randint(1, 150, (2, SEQ))
    for method in ("gradient", "integrated"):
        attribute(grafter, ids, [1, 2], method=method, steps=2)
    for (name, p), (_, q) in zip(recipient.named_parameters(), donor.named_parameters()):
        assert torch.equal(p, before[name][0]) and torch.equal(q, before[name][1]), name
        assert p.grad is None and q.grad is None, name
    assert recipient.training and not donor.training
    for model in (recipient, donor):
        assert all(not m._forward_hooks for m in model.modules())


def test_table_names_roles_and_covers_every_real_cell():
    recipient, donor = make_pair("gpt2")
    grafter = Grafter(recipient, donor)
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    attr = attribute(grafter, ids, [1, 2], attention_mask=mask)
    roles = [{"first_entity": [1, 2], "last_token": [4]}, {"FE": [0], "LT": [2]}]
    table = attr.table(roles=roles)
    per_position = grafter.num_layers * len(attr.layer_components) + len(attr.model_components)
    assert table.height == (5 + 3) * per_position
    row0 = table.filter(table["row"] == 0)
    assert row0.filter(row0["position"] == 1)["role"].unique().to_list() == ["FE"]
    assert row0.filter(row0["position"] == 0)["role"].unique().to_list() == ["other"]
    assert table.filter((table["row"] == 1) & (table["position"] == 2))["role"].unique().to_list() == ["LT"]
    # the table sums the cells in float64, `total` in float32 (measured: 5e-8 relative)
    assert table["effect"].sum() == pytest.approx(float(attr.total.sum()), rel=1e-5)
    model_rows = table.filter(table["layer"].is_null())
    assert sorted(model_rows["component"].unique().to_list()) == sorted(attr.model_components)


def test_bad_input_is_refused_with_the_fix():
    recipient, donor = make_pair("gpt2")
    grafter = Grafter(recipient, donor)
    ids = torch.randint(1, 150, (2, 4))
    with pytest.raises(ValueError, match="one target token per row"):
        attribute(grafter, ids, [1])
    with pytest.raises(ValueError, match="gradient' or 'integrated"):
        attribute(grafter, ids, [1, 2], method="exact")
    with pytest.raises(ValueError, match="not differentiable"):
        attribute(grafter, ids, [1, 2], metric="top5")
    with pytest.raises(ValueError, match="all zeros"):
        attribute(grafter, ids, [1, 2], attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]))


def test_several_donors_are_attributed_one_at_a_time():
    recipient, sft = make_pair("llama")
    _, task = make_pair("llama", seed=1)
    ids = torch.randint(1, 150, (2, SEQ), generator=torch.Generator().manual_seed(4))
    both = Grafter(recipient, donors={"sft": sft, "task": task})
    for name, model in (("sft", sft), ("task", task)):
        alone = attribute(Grafter(recipient, model), ids, [1, 2], method="integrated", steps=2)
        named = attribute(both, ids, [1, 2], method="integrated", steps=2, donor=name)
        # bit-identical by construction: the same kernels on the same rows, only the donor's
        # name differs
        assert torch.equal(named.cells, alone.cells)
        assert torch.equal(named.metric_donor, alone.metric_donor)
    with pytest.raises(ValueError, match="donor=NAME"):
        attribute(both, ids, [1, 2])
    with pytest.raises(ValueError, match="unknown donor 'base'"):
        attribute(both, ids, [1, 2], donor="base")
