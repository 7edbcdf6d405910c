"""The distilled loss of general text (`general_loss="kl"`) against an independent computation.

The oracle runs both models on every position with plain forwards (no hook, no position
selection) and writes the loss out by hand: cross-entropy on the facts' rows, sum of
p_base * (log p_base - log p_model) on the general rows, over labelled positions, divided by their
count. Value and gradients must agree; a model equal to its base learns nothing from general rows.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tiny_model_fixtures import make_model
from training_fixtures import tiny_artifacts
from weightgraft.data.data_errors import DataError
from weightgraft.training.batches import PadCollator, TextDataset
from weightgraft.training.distill import distilled_loss, frozen_copy
from weightgraft.training.finetune import FinetuneConfig, finetune


def _batch(vocab: int) -> dict:
    """Four rows of lengths 9, 5, 2 and 7, the second and fourth general, padded by the collator."""
    generator = torch.Generator().manual_seed(4)
    rows = [torch.randint(1, vocab, (n,), generator=generator).tolist() for n in (9, 5, 2, 7)]
    dataset = TextDataset(rows, [False, True, False, True])
    return PadCollator(pad_id=0)([dataset[i] for i in range(len(dataset))])


def _oracle(model, base, batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    with torch.no_grad():
        teacher = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["labels"][:, 1:]
    total, count = torch.zeros(()), 0
    for row in range(targets.shape[0]):
        for position in range(targets.shape[1]):
            if targets[row, position] == -100:
                continue
            log_q = torch.log_softmax(logits[row, position].double(), dim=-1)
            if batch["general"][row]:
                log_p = torch.log_softmax(teacher[row, position].double(), dim=-1)
                total = total + (log_p.exp() * (log_p - log_q)).sum()
            else:
                total = total - log_q[targets[row, position]]
            count += 1
    return (total / count).float()


def _grads(model, compute):
    model.zero_grad(set_to_none=True)
    loss = compute()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma2"])
def test_the_distilled_loss_equals_the_hand_written_one(arch):
    model = make_model(arch, seed=5)
    base = make_model(arch, seed=6)  # another model: the KL is far from zero
    batch = _batch(model.config.vocab_size)
    expected, expected_grads = _grads(model, lambda: _oracle(model, base, batch))
    got, got_grads = _grads(model, lambda: distilled_loss(model, base, batch)[0])
    assert expected > 0.1
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    counted = (batch["labels"][:, 1:] != -100).sum()
    torch.testing.assert_close(distilled_loss(model, base, batch, counted)[0], expected, rtol=1e-5, atol=1e-6)


def test_general_rows_teach_nothing_while_the_model_is_its_base():
    """KL(base || base) is 0 with a zero gradient: the general rows then add nothing, and the
    loss is the facts' cross-entropy scaled by their share of the labelled positions."""
    model, base = make_model("llama", seed=5), make_model("llama", seed=5)
    batch = _batch(model.config.vocab_size)
    facts_only = {k: v[~batch["general"]] for k, v in batch.items() if k != "general"}
    facts_only["general"] = torch.zeros(2, dtype=torch.bool)
    n_all = int((batch["labels"][:, 1:] != -100).sum())  # 8 + 4 + 1 + 6
    n_facts = int((facts_only["labels"][:, 1:] != -100).sum())  # 8 + 1
    assert (n_all, n_facts) == (19, 9)
    got, grads = _grads(model, lambda: distilled_loss(model, base, batch)[0])
    alone, alone_grads = _grads(model, lambda: distilled_loss(model, base, facts_only)[0])
    torch.testing.assert_close(got, alone * n_facts / n_all, rtol=1e-5, atol=1e-6)
    for name, grad in alone_grads.items():
        torch.testing.assert_close(grads[name], grad * n_facts / n_all, rtol=1e-4, atol=1e-7, msg=name)


def test_the_frozen_copy_stays_the_pretrained_model_while_the_original_trains():
    net = make_model("llama_tied", seed=5)
    base = frozen_copy(net)
    assert base.get_output_embeddings().weight is base.get_input_embeddings().weight  # ties kept
    assert not any(p.requires_grad for p in base.parameters()) and not base.training
    assert all(p.requires_grad for p in net.parameters())  # the original still trains
    before = {n: t.clone() for n, t in base.state_dict().items()}
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(1.0)
    assert all(torch.equal(t, before[n]) for n, t in base.state_dict().items())


def test_a_distilled_finetune_records_its_loss_and_differs_from_the_token_loss(tmp_path):
    art = tiny_artifacts()
    general = [f"the weather on day {i} was mild and the market was busy" for i in range(12)]
    base = dict(epochs=1, lr=5e-3, mix_ratio=0.3, device="cpu", max_validation_prompts=10, labelled_logits_only=True)
    runs = {
        loss: finetune(
            art.pretrained,
            art.relation_data,
            tmp_path / loss,
            FinetuneConfig(**base, general_loss=loss),
            general_texts=general,
            progress=False,
        )
        for loss in ("tokens", "kl")
    }
    records = {loss: json.loads((r.path / "training_config.json").read_text()) for loss, r in runs.items()}
    assert records["kl"]["general_loss"] == "kl" and "general_loss" not in records["tokens"]
    assert records["kl"]["n_general_texts"] == records["tokens"]["n_general_texts"] > 0
    before = load_file(art.pretrained / "model.safetensors")
    tokens, kl = (load_file(r.path / "model.safetensors") for r in runs.values())
    assert max((kl[n] - before[n]).abs().max().item() for n in kl) > 1e-3  # it trained
    assert any(not torch.allclose(kl[n], tokens[n], atol=1e-4) for n in kl)  # with another loss


def test_a_distilled_loss_without_general_text_is_refused(tmp_path):
    art = tiny_artifacts()
    with pytest.raises(DataError, match="needs mix_ratio > 0"):
        finetune(art.pretrained, art.relation_data, tmp_path / "x", FinetuneConfig(mix_ratio=0.0, general_loss="kl"))
