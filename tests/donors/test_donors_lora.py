"""A LoRA adapter as a donor (a folder or a PeftModel) grafts what the merged model grafts, lists
the components it changes, and refuses adapters it cannot graft exactly."""

from __future__ import annotations

import json

import pytest
import torch

from donor_fixtures import lora_model, merged_copy, padded_batch  # noqa: F401
from tiny_model_fixtures import make_model
from weightgraft import Graft, Grafter
from weightgraft.donors import LoraDonor

ARCHS = ["llama", "gpt2", "qwen3"]
# fp32 rounding: the adapter donor adds B(Ax) to the recipient's output, the merged model computes
# with W + BA: the same math, summed in another order (measured <= 1.6e-6 on logits).
ATOL = 1e-5


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    """arch -> (recipient, PeftModel on a separate copy, merged model, adapter folder)."""
    out = {}
    for arch in ARCHS:
        patterns = {} if arch == "gpt2" else {"rank_pattern": {"o_proj": 2}}  # GPT-2 has no o_proj
        peft_model = lora_model(arch, 1, use_rslora=arch == "qwen3", **patterns)
        folder = tmp_path_factory.mktemp(f"lora_{arch}")
        peft_model.save_pretrained(folder)
        out[arch] = (make_model(arch, 1), peft_model, merged_copy(peft_model), folder)
    return out


@pytest.mark.parametrize("source", ["folder", "peft_model"])
@pytest.mark.parametrize("arch", ARCHS)
def test_adapter_donor_equals_merged_donor(adapted, arch, source):
    recipient, peft_model, merged, folder = adapted[arch]
    ids, mask, row_grafts = padded_batch()
    want = Grafter(recipient, merged).logits(ids, row_grafts=row_grafts, attention_mask=mask)
    donor = str(folder) if source == "folder" else peft_model
    got = Grafter(recipient, donor).logits(ids, row_grafts=row_grafts, attention_mask=mask)
    real = mask.bool()
    assert (got[real] - want[real]).abs().max().item() < ATOL
    plain = recipient(input_ids=ids, attention_mask=mask).logits
    assert (got[real] - plain[real]).abs().max().item() > 1e-3, "the adapter must change the grafted rows"


def test_changed_components_and_unchanged_grafts(adapted):
    recipient, _, _, folder = adapted["llama"]
    grafter = Grafter(recipient, str(folder))
    assert grafter.changed_components == ["q", "v", "o", "up", "down"]  # in the adapter table's order
    ids = torch.randint(1, 151, (2, 6), generator=torch.Generator().manual_seed(4))
    plain = recipient(input_ids=ids).logits
    untouched = grafter.logits(ids, grafts=Graft("all", "all", ["k", "gate", "ln1", "ln2", "lm_head"]))
    assert torch.equal(untouched, plain)
    gpt2 = Grafter(adapted["gpt2"][0], str(adapted["gpt2"][3]))
    assert set(gpt2.changed_components) == {"q", "k", "v", "up"}  # LoRA on the fused c_attn changes q, k and v


def test_lora_on_embeddings_and_lm_head(tmp_path):
    peft_model = lora_model("llama", 5, target_modules=["embed_tokens", "lm_head", "gate_proj"])
    peft_model.save_pretrained(tmp_path)
    recipient, merged = make_model("llama", 5), merged_copy(peft_model)
    ids, mask, row_grafts = padded_batch()
    want = Grafter(recipient, merged).logits(ids, row_grafts=row_grafts, attention_mask=mask)
    got = Grafter(recipient, str(tmp_path)).logits(ids, row_grafts=row_grafts, attention_mask=mask)
    assert (got[mask.bool()] - want[mask.bool()]).abs().max().item() < ATOL


def test_adapter_for_another_base_model_is_refused(adapted, tmp_path):
    _, _, _, folder = adapted["qwen3"]
    other = make_model("llama", 1)  # same widths as the tiny Qwen3 for q, but k/v and head_dim differ
    with pytest.raises(ValueError, match="another base model"):
        Grafter(other, str(folder))
    wide = lora_model("gpt2", 1)  # a GPT-2 adapter into a llama
    wide.save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="another base model|does not fit"):
        Grafter(make_model("llama", 1), str(tmp_path / "gpt2"))


def test_adapter_recorded_for_another_base_name_is_refused(tmp_path):
    lora_model("llama", 1).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "org/some-other-model"
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    recipient = make_model("llama", 1)
    recipient.config._name_or_path = "org/tiny-llama"
    with pytest.raises(ValueError, match="trained on 'org/some-other-model'.*check_base_model=False"):
        Grafter(recipient, str(tmp_path))
    assert LoraDonor(tmp_path, recipient, check_base_model=False).changed_paths()


def test_dora_and_other_peft_types_are_refused_by_name(tmp_path):
    from peft import IA3Config, get_peft_model

    lora_model("llama", 1, use_dora=True).save_pretrained(tmp_path / "dora")
    recipient = make_model("llama", 1)
    with pytest.raises(ValueError, match="DoRA"):
        Grafter(recipient, str(tmp_path / "dora"))
    ia3 = get_peft_model(
        make_model("llama", 1), IA3Config(target_modules=["v_proj", "down_proj"], feedforward_modules=["down_proj"])
    )
    ia3.save_pretrained(tmp_path / "ia3")
    with pytest.raises(ValueError, match="IA3 adapter"):
        Grafter(recipient, str(tmp_path / "ia3"))


def test_pickled_adapter_and_adapted_recipient_are_refused(adapted, tmp_path):
    recipient, _, _, folder = adapted["llama"]
    (tmp_path / "adapter_config.json").write_text((folder / "adapter_config.json").read_text())
    (tmp_path / "adapter_model.bin").write_bytes(b"never unpickled")
    with pytest.raises(FileNotFoundError, match=r"only pickled weights \['adapter_model.bin'\]"):
        Grafter(recipient, str(tmp_path))
    peft_on_recipient = lora_model("llama", 1)
    with pytest.raises(ValueError, match="PEFT layers injected"):
        Grafter(peft_on_recipient.get_base_model(), peft_on_recipient)


def test_generation_with_an_adapter_donor(adapted):
    recipient, _, merged, folder = adapted["qwen3"]
    ids = torch.randint(1, 151, (2, 5), generator=torch.Generator().manual_seed(6))
    graft = Graft("last", "all", ["k", "o", "mlp"])
    want = Grafter(recipient, merged).generate(ids, grafts=graft, max_new_tokens=4, generated="last")
    got = Grafter(recipient, str(folder)).generate(ids, grafts=graft, max_new_tokens=4, generated="last")
    assert torch.equal(got, want)
    plain = Grafter(recipient, merged).generate(ids, max_new_tokens=4)
    assert not torch.equal(got, plain)
