"""A lazy donor (a safetensors folder) computes what the same donor in memory computes, reads only
the grafted modules' tensors, and refuses bad checkpoints before reading any tensor."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from donor_fixtures import padded_batch, save_model  # noqa: F401
from tiny_model_fixtures import make_model
from weightgraft import Graft, Grafter
from weightgraft.donors import LazyDonor

ARCHS = ["llama", "gpt2", "qwen3", "llama_tied"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """arch -> (recipient, donor in memory, donor folder)."""
    out = {}
    for arch in ARCHS:
        recipient, donor = make_model(arch, 1), make_model(arch, 2)
        out[arch] = (recipient, donor, save_model(donor, tmp_path_factory.mktemp(arch)))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_lazy_donor_equals_full_donor(saved, arch):
    recipient, donor, folder = saved[arch]
    ids, mask, row_grafts = padded_batch()
    want = Grafter(recipient, donor).logits(ids, row_grafts=row_grafts, attention_mask=mask)
    lazy = Grafter(recipient, str(folder))
    got = lazy.logits(ids, row_grafts=row_grafts, attention_mask=mask)
    assert torch.equal(got[mask.bool()], want[mask.bool()])
    # Sanity: the grafts change something, and the cached tensors give the same answer again.
    plain = Grafter(recipient, donor).logits(ids, attention_mask=mask)
    assert not torch.allclose(got[mask.bool()], plain[mask.bool()])
    again = lazy.last_logits(ids, row_grafts=row_grafts, attention_mask=mask)
    want_last = Grafter(recipient, donor).last_logits(ids, row_grafts=row_grafts, attention_mask=mask)
    assert torch.equal(again, want_last)


def test_lazy_donor_reads_only_the_grafted_modules(saved):
    recipient, _, folder = saved["llama"]
    source = LazyDonor(folder)
    grafter = Grafter(recipient, source)
    assert dict(source.loaded) == {}, "the compatibility checks must not read tensors"
    ids = torch.randint(1, 151, (2, 6), generator=torch.Generator().manual_seed(0))
    grafter.last_logits(ids, grafts=Graft("last", [1, 3], ["o", "up"]))
    expected = {f"model.layers.{i}.{m}.weight" for i in (1, 3) for m in ("self_attn.o_proj", "mlp.up_proj")}
    assert dict(source.loaded) == dict.fromkeys(expected, 1)
    grafter.last_logits(ids, grafts=Graft("last", 3, "up"))  # cached: nothing read again
    grafter.prefetch(Graft("all", 0, "ln1"))
    expected.add("model.layers.0.input_layernorm.weight")
    assert dict(source.loaded) == dict.fromkeys(expected, 1)
    grafter.release()
    grafter.last_logits(ids, grafts=Graft("last", 3, "up"))
    assert source.loaded["model.layers.3.mlp.up_proj.weight"] == 2
    assert source.loaded["model.layers.1.mlp.up_proj.weight"] == 1


def test_lazy_donor_in_a_donors_mapping(saved):
    recipient, donor, folder = saved["gpt2"]
    ids = torch.randint(1, 151, (2, 5), generator=torch.Generator().manual_seed(1))
    graft = Graft("last", "all", ["q", "up", "lm_head"], donor="ckpt")
    got = Grafter(recipient, donors={"ckpt": str(folder), "mem": donor}).last_logits(ids, grafts=graft)
    want = Grafter(recipient, donor).last_logits(ids, grafts=Graft("last", "all", ["q", "up", "lm_head"]))
    assert torch.equal(got, want)


def test_sharded_checkpoint_and_missing_shard(saved, tmp_path):
    recipient, donor, _ = saved["llama"]
    folder = save_model(donor, tmp_path / "sharded", max_shard_size="40KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    ids = torch.randint(1, 151, (2, 6), generator=torch.Generator().manual_seed(2))
    graft = Graft("last", "all", "all")
    want = Grafter(recipient, donor).last_logits(ids, grafts=graft)
    assert torch.equal(Grafter(recipient, str(folder)).last_logits(ids, grafts=graft), want)
    (folder / shards[1]).unlink()
    with pytest.raises(FileNotFoundError, match=f"missing: \\['{shards[1]}'\\]"):
        Grafter(recipient, str(folder))


def test_pickle_only_checkpoint_is_refused(saved, tmp_path):
    recipient, donor, _ = saved["llama"]
    donor.config.save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(ValueError, match=r"only pickled weights \['pytorch_model.bin'\].*safetensors"):
        Grafter(recipient, str(tmp_path))


def test_mismatched_shapes_are_named_before_any_tensor_is_read(saved, tmp_path):
    recipient, donor, _ = saved["llama"]
    state = {n: p.detach().clone() for n, p in donor.named_parameters()}
    state["model.layers.2.mlp.up_proj.weight"] = torch.zeros(40, 32)  # config says [48, 32]
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    donor.config.save_pretrained(tmp_path)
    source = LazyDonor(tmp_path)
    with pytest.raises(
        ValueError, match=r"model.layers.2.mlp.up_proj.weight: recipient \(48, 32\) vs donor \(40, 32\)"
    ):
        Grafter(recipient, source)
    assert dict(source.loaded) == {}
    # Another configuration: refused on the config, naming the field.
    other = make_model("qwen2", 2)
    other_folder = save_model(other, tmp_path / "qwen2")
    with pytest.raises(ValueError, match="model_type|architecture"):
        Grafter(recipient, str(other_folder))


def test_missing_folder_is_a_clear_error(saved, tmp_path):
    recipient, _, _ = saved["llama"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Grafter(recipient, str(tmp_path / "no" / "such" / "folder"))


def test_lazy_donor_takes_the_recipients_dtype(saved):
    """An fp32 checkpoint grafted into a bf16 recipient equals the donor cast to bf16 in memory."""
    import copy

    recipient, donor, folder = saved["qwen3"]
    recipient_bf16, donor_bf16 = copy.deepcopy(recipient).bfloat16(), copy.deepcopy(donor).bfloat16()
    ids, mask, row_grafts = padded_batch()
    want = Grafter(recipient_bf16, donor_bf16).last_logits(ids, row_grafts=row_grafts, attention_mask=mask)
    got = Grafter(recipient_bf16, str(folder)).last_logits(ids, row_grafts=row_grafts, attention_mask=mask)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_hub_id_resolves_through_the_local_cache(saved, tmp_path, monkeypatch):
    """A donor named by hub id is found in the Hugging Face cache (offline: nothing is fetched)."""
    import shutil

    from huggingface_hub import constants

    recipient, donor, folder = saved["gpt2"]
    repo = tmp_path / "models--someone--tiny-gpt2"
    shutil.copytree(folder, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    ids = torch.randint(1, 151, (2, 5), generator=torch.Generator().manual_seed(5))
    graft = Graft("last", "last_half", "all")
    got = Grafter(recipient, "someone/tiny-gpt2").last_logits(ids, grafts=graft)
    assert torch.equal(got, Grafter(recipient, donor).last_logits(ids, grafts=graft))
    with pytest.raises(FileNotFoundError, match="'someone/other' is neither a local folder nor"):
        Grafter(recipient, "someone/other")
