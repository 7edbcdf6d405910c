"""Half precision on CPU (the bf16 path GPUs use) and user-registered adapters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from weightgraft import Adapter, Graft, Grafter, register_adapter
from weightgraft.adapters import adapter_for


def _llama_pair(dtype: torch.dtype, tie: bool = False):
    config = LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie,
    )  # fmt: skip
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        models.append(model.to(dtype))
    return models


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_grafting_matches_float32_grafting(dtype):
    recipient, donor = _llama_pair(torch.float32)
    half_r, half_d = _llama_pair(dtype)
    ids = torch.randint(0, 97, (3, 10))
    graft = Graft([0, 1, -1], "last_half", ["o", "mlp", "ln2"])
    full = Grafter(recipient, donor).logits(ids, grafts=graft)
    half = Grafter(half_r, half_d).logits(ids, grafts=graft)
    assert half.dtype == dtype
    # Same computation in lower precision: close to float32, and far from the ungrafted output.
    # bf16 keeps 8 significant bits (fp16 11), so each op rounds by up to 2^-9 (2^-12) relative
    # and two layers add that up: measured err 0.037 (bf16) and 0.005 (fp16) on logits whose
    # graft moves them by up to gap = 1.96. The bounds: under 5% of the graft's effect and 0.1.
    err = (half.float() - full).abs().max().item()
    gap = (Grafter(recipient, donor).logits(ids) - full).abs().max().item()
    assert err < 0.05 * gap
    assert err < 0.1


def test_bfloat16_all_equals_donor_and_none_equals_recipient():
    recipient, donor = _llama_pair(torch.bfloat16)
    ids = torch.randint(0, 97, (2, 7))
    grafter = Grafter(recipient, donor)
    with torch.no_grad():
        plain_r, plain_d = recipient(ids).logits, donor(ids).logits
    assert torch.equal(grafter.logits(ids), plain_r)
    # Everything grafted runs the donor's own modules on the same rows: measured bit-identical on
    # CPU, but the engine gathers the rows before each module, so a backend may round them another
    # way; 2e-2 is about one bf16 step at the largest logits here (|logit| < 2: spacing 2^-6 = 0.016).
    assert (grafter.logits(ids, grafts=Graft()).float() - plain_d.float()).abs().max().item() < 2e-2


def test_models_on_different_dtypes_are_refused():
    recipient, _ = _llama_pair(torch.float32)
    _, donor = _llama_pair(torch.bfloat16)
    with pytest.raises(ValueError, match="dtype"):
        Grafter(recipient, donor)


class _TinyBlock(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.wqkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.wqkv(self.norm(x)).chunk(3, dim=-1)
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        return x + self.out(scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v)


class _TinyConfig:
    model_type = "tiny_custom"


class _TinyLM(nn.Module):
    """A model weightgraft does not ship, to show a user adapter at work."""

    def __init__(self, seed: int, d: int = 16, vocab: int = 50):
        super().__init__()
        torch.manual_seed(seed)
        self.config = _TinyConfig()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([_TinyBlock(d) for _ in range(2)])
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, **_):
        # Takes (and ignores) the cache arguments a Grafter passes; returns what HF models return.
        x = self.tok(input_ids)
        for block in self.blocks:
            x = block(x)
        return SimpleNamespace(logits=self.head(x), past_key_values=None)


def test_user_adapter_grafts_only_the_named_part_of_a_fused_matrix(registry_restored):
    from weightgraft import Part
    from weightgraft.adapters import contiguous_split

    register_adapter(
        Adapter(
            model_types=("tiny_custom",),
            layers="blocks",
            model_level={"embed": "tok", "lm_head": "head"},
            per_layer={
                "q": Part("wqkv", "q"), "k": Part("wqkv", "k"), "v": Part("wqkv", "v"),
                "o": "out", "ln1": "norm",
            },
            attn_module="wqkv",  # no attention submodule here: the group is the fused matrix
            mlp_module="mlp",
            splits={"wqkv": lambda cfg: contiguous_split({"q": 16, "k": 16, "v": 16})},
        ),
        replace=True,
    )  # fmt: skip
    recipient, donor = _TinyLM(0), _TinyLM(1)
    assert adapter_for(recipient).model_types == ("tiny_custom",)
    # Expected: the recipient with the donor's v rows of wqkv copied in (v at every position).
    expected_model = _TinyLM(0)
    with torch.no_grad():
        for i in range(2):
            expected_model.blocks[i].wqkv.weight[32:] = donor.blocks[i].wqkv.weight[32:]
            expected_model.blocks[i].wqkv.bias[32:] = donor.blocks[i].wqkv.bias[32:]
    ids = torch.randint(0, 50, (2, 6))
    grafted = Grafter(recipient, donor).logits(ids, grafts=Graft(components="v"))
    with torch.no_grad():
        expected = expected_model(ids).logits
        plain = recipient(ids).logits
    assert (grafted - expected).abs().max().item() < 1e-5  # fp32: same math, the engine splices rows (measured 0)
    assert (grafted - plain).abs().max().item() > 1e-2  # the graft did something


def test_adapter_missing_a_parameter_is_refused(registry_restored):
    register_adapter(
        Adapter(
            model_types=("tiny_custom",),
            layers="blocks",
            model_level={"embed": "tok"},  # forgets the head
            per_layer={"o": "out", "ln1": "norm"},
            attn_module="wqkv",
            mlp_module="mlp",
        ),
        replace=True,
    )
    with pytest.raises(ValueError, match="does not cover parameters"):
        Grafter(_TinyLM(0), _TinyLM(1))


def test_registered_adapters_are_removed_after_the_tests_that_add_them():
    from weightgraft.adapters import supported_model_types

    assert "tiny_custom" not in supported_model_types()
