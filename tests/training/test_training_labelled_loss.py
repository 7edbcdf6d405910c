"""The finetune's fast loss (`labelled_logits_only`) against transformers' own loss.

The unembedding is applied only where a label is; the oracle is the model's loss computed with
`labels=` over every position (padding ignored by -100). Value and every parameter's gradient
must agree, on architectures with tied and untied heads and with Gemma's logit soft-capping.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tiny_model_fixtures import make_model
from training_fixtures import tiny_artifacts
from weightgraft.training.batches import labelled_loss
from weightgraft.training.finetune import FinetuneConfig, finetune

ARCHS = ["llama", "gpt2", "gpt_neox", "gemma2", "gemma3_text"]


def _padded_batch(vocab: int) -> dict:
    """Three rows of lengths 9, 5 and 2, right-padded with -100 labels as the collator does."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(1, vocab, (3, 9), generator=generator)
    mask = torch.zeros(3, 9, dtype=torch.long)
    for row, length in enumerate((9, 5, 2)):
        mask[row, :length] = 1
    ids = ids.masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _loss_and_grads(model, compute):
    model.zero_grad(set_to_none=True)
    loss = compute()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("counted", [False, True])
def test_labelled_loss_equals_the_models_own_loss_and_gradients(arch, counted):
    model = make_model(arch, seed=5)  # eval mode: no dropout, so both passes see one network
    if arch == "gemma2":
        assert model.config.final_logit_softcapping  # the cap must apply after the head
    batch = _padded_batch(model.config.vocab_size)
    n_items = (batch["labels"][:, 1:] != -100).sum() if counted else None
    extra = {"num_items_in_batch": n_items} if counted else {}
    expected, expected_grads = _loss_and_grads(model, lambda: model(**batch, **extra).loss)
    got, got_grads = _loss_and_grads(model, lambda: labelled_loss(model, batch, n_items)[0])
    assert n_items is None or int(n_items) == 8 + 4 + 1
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert got_grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_a_finetune_with_the_fast_loss_trains_the_same_weights(tmp_path):
    """Same batches, same loss: one epoch with `labelled_logits_only` ends where the plain loss
    ends, to float round-off; with length-grouped batches it trains too, and both are recorded."""
    art = tiny_artifacts()
    base = dict(epochs=1, lr=5e-3, mix_ratio=0.0, device="cpu", max_validation_prompts=20)
    plain = finetune(art.pretrained, art.relation_data, tmp_path / "plain", FinetuneConfig(**base), progress=False)
    fast = finetune(
        art.pretrained,
        art.relation_data,
        tmp_path / "fast",
        FinetuneConfig(**base, labelled_logits_only=True),
        progress=False,
    )
    grouped = finetune(
        art.pretrained,
        art.relation_data,
        tmp_path / "grouped",
        FinetuneConfig(**base, labelled_logits_only=True, group_by_length=True),
        progress=False,
    )
    before = load_file(art.pretrained / "model.safetensors")
    a, b, c = (load_file(r.path / "model.safetensors") for r in (plain, fast, grouped))
    moved = max((a[n] - before[n]).abs().max().item() for n in a)
    assert moved > 1e-3
    # Round-off through Adam: 1.35e-4 of `moved` measured on lm_head on an AVX-512 Xeon (the sum
    # over fewer logits rounds differently), below 1e-5 elsewhere; a wrong loss moves weights by
    # the order of `moved` itself, so 1e-3 still tells them apart.
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-3 * moved, msg=name)
    assert any(not torch.allclose(c[n], a[n], atol=1e-3 * moved) for n in a)  # other batches
    assert max((c[n] - before[n]).abs().max().item() for n in c) > 1e-3
