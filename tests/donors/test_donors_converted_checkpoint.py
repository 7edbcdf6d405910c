"""A donor folder that transformers converts as it loads (its MoE experts stored one tensor each)
cannot be read module by module; it is loaded whole, and grafts from it equal grafts from the same
donor in memory. A checkpoint that really lacks a tensor is still refused."""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file
from transformers import MixtralConfig, MixtralForCausalLM

from weightgraft import Graft, Grafter
from weightgraft.donors import FullDonor, LazyDonor
from weightgraft.donors.sources import as_donor_source

CONFIG = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
)


def _model(seed: int) -> MixtralForCausalLM:
    torch.manual_seed(seed)
    return MixtralForCausalLM(MixtralConfig(**CONFIG)).eval()


def test_a_moe_checkpoint_written_per_expert_grafts_as_the_donor_in_memory(tmp_path):
    recipient, donor = _model(0), _model(1)
    donor.save_pretrained(tmp_path / "sft")
    stored = load_file(tmp_path / "sft" / "model.safetensors")
    assert "model.layers.0.block_sparse_moe.experts.0.w1.weight" in stored  # transformers' per-expert layout
    source = as_donor_source(tmp_path / "sft", recipient)
    assert isinstance(source, FullDonor) and not isinstance(source, LazyDonor)
    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(2))
    grafts = [Graft([4], "all", ["router", "experts"], "sft")]
    from_folder = Grafter(recipient, donors={"sft": tmp_path / "sft"}).logits(ids, grafts)
    in_memory = Grafter(recipient, donors={"sft": donor}).logits(ids, grafts)
    plain = Grafter(recipient, donors={"sft": donor}).logits(ids, [])
    assert torch.equal(from_folder, in_memory) and (from_folder - plain).abs().max() > 1e-3


def test_a_converted_checkpoint_missing_a_tensor_is_refused_not_left_random(tmp_path):
    recipient = _model(0)
    _model(1).save_pretrained(tmp_path / "sft")
    path = tmp_path / "sft" / "model.safetensors"
    tensors = load_file(path)
    del tensors["model.layers.1.block_sparse_moe.experts.2.w2.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    try:
        as_donor_source(tmp_path / "sft", recipient)
    except ValueError as err:
        assert "lacks tensors" in str(err) and "loading it whole" in str(err)
    else:
        raise AssertionError("a donor missing an expert's tensor was accepted")
