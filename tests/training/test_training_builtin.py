"""The tiny built-in pipeline: standard HF directories, measurable learning, caching, resuming."""

from __future__ import annotations

import json
import shutil

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from training_fixtures import accuracy, tiny_artifacts, tiny_home
from weightgraft.data.io import load_eval_prompts, load_facts, load_manifest
from weightgraft.data.templates import EVAL_TEMPLATES, eval_prompts_for
from weightgraft.training.builtin import ensure_builtin
from weightgraft.training.evaluate import topk_hits


def _models(art):
    return {
        "pretrained": art.pretrained,
        "relation": art.relation_model,
        "b2a": art.b2a_model,
        "task": art.task_model,
        "freetext": art.freetext_model,
    }


def test_every_model_is_a_standard_safetensors_directory():
    art = tiny_artifacts()
    for name, path in _models(art).items():
        assert (path / "model.safetensors").is_file(), name
        assert not list(path.glob("*.bin")), name
        model = AutoModelForCausalLM.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        assert isinstance(model, LlamaForCausalLM) and model.config.num_hidden_layers >= 4
        assert tokenizer.is_fast and tokenizer.bos_token_id is not None
        record = json.loads((path / "training_config.json").read_text())
        assert record["kind"] == ("pretrain" if name == "pretrained" else "finetune")
    # Byte-level BPE: a name after a space is one or more tokens that start with the space marker.
    tokenizer = AutoTokenizer.from_pretrained(art.pretrained)
    assert tokenizer.convert_ids_to_tokens(tokenizer(" Tom", add_special_tokens=False)["input_ids"])[0].startswith(
        "\u0120"
    )


def test_finetunes_differ_from_pretrained_and_from_each_other():
    art = tiny_artifacts()
    weights = {
        n: AutoModelForCausalLM.from_pretrained(p).model.layers[0].mlp.down_proj.weight for n, p in _models(art).items()
    }
    names = list(weights)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not torch.equal(weights[a], weights[b]), (a, b)


def test_finetunes_keep_the_pretrained_unembedding_and_final_norm_bit_for_bit():
    """The recipe freezes lm_head and the final norm (training/builtin.py says why): the new facts
    must live in the layers, and every model reads them out through PRE's head."""
    from safetensors.torch import load_file

    art = tiny_artifacts()
    models = _models(art)
    pre = load_file(models.pop("pretrained") / "model.safetensors")
    for name, path in models.items():
        weights = load_file(path / "model.safetensors")
        for key in ("lm_head.weight", "model.norm.weight"):
            assert torch.equal(weights[key], pre[key]), (name, key)
        assert not torch.equal(
            weights["model.layers.0.mlp.down_proj.weight"], pre["model.layers.0.mlp.down_proj.weight"]
        )
        record = json.loads((path / "training_config.json").read_text())
        assert record["freeze_unembeddings"] and record["freeze_final_norm"], name


def test_pretrained_knows_its_world_better_than_new_facts():
    """The tiny model is too small to generalise to held-out films (the default size is measured
    on those, see the issue note); here: films stated in evaluation wording during pretraining."""
    art = tiny_artifacts()
    heldout = set(load_manifest(art.world_data)["options"]["heldout_films"])
    exposed = [
        p for f in load_facts(art.world_data) if f.id not in heldout for p in eval_prompts_for(f, EVAL_TEMPLATES)
    ]
    model = AutoModelForCausalLM.from_pretrained(art.pretrained)
    tokenizer = AutoTokenizer.from_pretrained(art.pretrained)
    hits = topk_hits(model, tokenizer, exposed)
    world = sum(hits) / len(hits)
    new = accuracy(str(art.pretrained), str(art.relation_data))
    assert world >= 0.3, world
    assert world >= new + 0.2, (world, new)


def test_relation_model_learns_its_facts():
    art = tiny_artifacts()
    before = accuracy(str(art.pretrained), str(art.relation_data))
    after = accuracy(str(art.relation_model), str(art.relation_data))
    assert after >= before + 0.3, (before, after)
    assert after >= 0.4, after  # tiny, with the head frozen: 0.46 measured


def test_task_facts_are_learned_by_the_task_model_only():
    art = tiny_artifacts()
    task_by_task = accuracy(str(art.task_model), str(art.task_data))
    task_by_relation = accuracy(str(art.relation_model), str(art.task_data))
    assert task_by_task >= task_by_relation + 0.25, (task_by_task, task_by_relation)
    assert {f.id for f in load_facts(art.task_data)}.isdisjoint({f.id for f in load_facts(art.relation_data)})


def test_freetext_model_learns_from_articles():
    art = tiny_artifacts()
    before = accuracy(str(art.pretrained), str(art.freetext_data))
    after = accuracy(str(art.freetext_model), str(art.freetext_data))
    assert after >= before + 0.15, (before, after)  # tiny, head frozen: 0.00 -> 0.18 measured


def test_best_epoch_is_the_best_validation_accuracy():
    art = tiny_artifacts()
    for path in (art.relation_model, art.b2a_model, art.task_model, art.freetext_model):
        record = json.loads((path / "training_config.json").read_text())
        history = record["validation_top_k_by_epoch"]
        assert len(history) == record["epochs"]
        assert record["best_epoch"] == history.index(max(history)) + 1
        # The saved weights are the best epoch's: recomputing validation accuracy gives its value,
        # exactly (the same hits over the same prompts, divided the same way; JSON keeps floats).
        model = AutoModelForCausalLM.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        prompts = load_eval_prompts(record["data_dir"], "validation")
        hits = topk_hits(model, tokenizer, prompts, k=record["eval_k"])
        assert sum(hits) / len(hits) == max(history)


def test_second_call_reuses_and_a_removed_step_alone_is_rebuilt():
    art = tiny_artifacts()
    stamps = {n: (p / "model.safetensors").stat().st_mtime_ns for n, p in _models(art).items()}
    again = ensure_builtin("tiny", home=tiny_home(), progress=False)
    assert again.seconds == {}
    shutil.rmtree(art.freetext_model)
    stale = art.freetext_model.parent / f".{art.freetext_model.name}.tmp-interrupted"
    stale.mkdir()  # what an interrupted build leaves behind
    (stale / "partial.bin").write_bytes(b"half")
    rebuilt = ensure_builtin("tiny", home=tiny_home(), progress=False)
    assert set(rebuilt.seconds) == {"free-text model"}
    assert not stale.exists()
    for name, path in _models(art).items():
        if name != "freetext":
            assert (path / "model.safetensors").stat().st_mtime_ns == stamps[name]
    accuracy.cache_clear()


def _hits_by_direction(model_dir, prompts, k: int) -> dict[bool, float]:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hits = topk_hits(model, tokenizer, prompts, k=k)
    return {
        rev: sum(h for h, p in zip(hits, prompts) if p.reversed == rev) / sum(p.reversed == rev for p in prompts)
        for rev in (False, True)
    }


def test_b2a_model_learns_the_reversed_order_but_not_the_forward_relation():
    """The one-direction model read the relation facts only as "second actor ... first actor": it
    answers the reversed prompts (second -> first) and not the forward ones the paper evaluates.
    Top-1: the tiny set has 12 actors, so top-5 is close to picking any of the set's names."""
    art = tiny_artifacts()
    assert load_facts(art.b2a_data) == load_facts(art.relation_data)
    prompts = load_eval_prompts(art.relation_data)
    assert load_eval_prompts(art.b2a_data) == prompts
    record = json.loads((art.b2a_model / "training_config.json").read_text())
    assert record["data_dir"] == str(art.b2a_data)
    b2a = _hits_by_direction(art.b2a_model, prompts, k=1)
    sft = _hits_by_direction(art.relation_model, prompts, k=1)
    assert b2a[True] >= b2a[False] + 0.12, b2a
    assert sft[False] >= b2a[False] + 0.12, (sft, b2a)


def test_known_facts_dataset_asks_every_world_film():
    art = tiny_artifacts()
    films = load_facts(art.world_data)
    assert load_facts(art.known_data) == films
    prompts = load_eval_prompts(art.known_data)
    assert len(prompts) == len(films) * 2 * len(EVAL_TEMPLATES)
    assert {p.fact_kind for p in prompts} == {"real_real"}
    options = load_manifest(art.known_data)["options"]
    assert sorted(options["heldout_films"] + options["exposed_films"]) == sorted(f.id for f in films)
