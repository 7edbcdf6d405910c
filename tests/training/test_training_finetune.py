"""Finetuning options and the `weightgraft train` / `data` / `pretrain` commands."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from training_fixtures import tiny_artifacts, tiny_home
from weightgraft.data.io import load_facts, load_manifest
from weightgraft.training.finetune import FinetuneConfig, finetune


def _app():
    """The real command group, so that a user's error takes the CLI's one-line path."""
    from weightgraft.cli import _register_all, app

    _register_all()
    return app


def test_frozen_embeddings_and_unembeddings_stay_put_in_bf16(tmp_path):
    art = tiny_artifacts()
    config = FinetuneConfig(
        epochs=1,
        lr=5e-3,
        precision="bf16",
        freeze_embeddings=True,
        freeze_unembeddings=True,
        mix_ratio=0.0,
        device="cpu",
    )
    result = finetune(art.pretrained, art.relation_data, tmp_path / "frozen", config, progress=False)
    before = load_file(art.pretrained / "model.safetensors")
    after = load_file(result.path / "model.safetensors")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.equal(before[name], after[name]), name
    assert not torch.equal(before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"])
    record = json.loads((result.path / "training_config.json").read_text())
    assert record["precision"] == "bf16" and record["freeze_embeddings"] and record["epochs"] == 1
    assert record["data_sha256"] == load_manifest(art.relation_data)["sha256"]


def test_frozen_final_norm_and_head_stay_put_while_the_layers_move(tmp_path):
    """The built-in recipe's freeze: final norm and lm_head equal bit for bit after training."""
    art = tiny_artifacts()
    config = FinetuneConfig(epochs=1, lr=5e-3, freeze_unembeddings=True, freeze_final_norm=True, mix_ratio=0.0)
    result = finetune(art.pretrained, art.relation_data, tmp_path / "frozen", config, progress=False)
    before = load_file(art.pretrained / "model.safetensors")
    after = load_file(result.path / "model.safetensors")
    for name in ("model.norm.weight", "lm_head.weight"):
        assert torch.equal(before[name], after[name]), name
    for name in (
        "model.embed_tokens.weight",
        "model.layers.3.mlp.down_proj.weight",
        "model.layers.3.input_layernorm.weight",
    ):
        assert not torch.equal(before[name], after[name]), name
    assert json.loads((result.path / "training_config.json").read_text())["freeze_final_norm"]


def test_a_lora_finetune_saves_a_plain_model_whose_linears_moved_by_low_rank_deltas(tmp_path):
    """lora_rank=N: the saved model has the base model's tensor names (merged, no adapter keys);
    every block linear moved by a delta of rank <= N; embeddings and norms stayed bit for bit."""
    art = tiny_artifacts()
    config = FinetuneConfig(epochs=1, lr=5e-3, mix_ratio=0.0, device="cpu", lora_rank=2)
    result = finetune(art.pretrained, art.relation_data, tmp_path / "lora", config, progress=False)
    before = load_file(art.pretrained / "model.safetensors")
    after = load_file(result.path / "model.safetensors")
    assert set(after) == set(before)
    linears = [n for n in before if ".layers." in n and n.endswith("_proj.weight")]
    assert linears
    for name in linears:
        delta = (after[name] - before[name]).double()
        assert delta.abs().max() > 0, name
        assert torch.linalg.matrix_rank(delta, rtol=1e-4) <= 2, name
    for name in set(before) - set(linears):
        assert torch.equal(before[name], after[name]), name
    assert json.loads((result.path / "training_config.json").read_text())["lora_rank"] == 2
    with pytest.raises(Exception, match="lora_rank must be 0"):
        finetune(art.pretrained, art.relation_data, tmp_path / "bad", FinetuneConfig(lora_rank=-1), progress=False)


def test_frozen_first_blocks_stay_put_while_the_later_blocks_move(tmp_path):
    """`freeze_layers=2`: blocks 0 and 1 (every tensor of them) equal bit for bit, blocks 2-3 move."""
    art = tiny_artifacts()
    config = FinetuneConfig(epochs=1, lr=5e-3, freeze_embeddings=True, freeze_layers=2, mix_ratio=0.0)
    result = finetune(art.pretrained, art.relation_data, tmp_path / "frozen", config, progress=False)
    before = load_file(art.pretrained / "model.safetensors")
    after = load_file(result.path / "model.safetensors")
    frozen = [n for n in before if n.startswith(("model.layers.0.", "model.layers.1."))]
    assert len(frozen) == 2 * 9  # q, k, v, o, gate, up, down and two norms per block
    for name in [*frozen, "model.embed_tokens.weight"]:
        assert torch.equal(before[name], after[name]), name
    for block in (2, 3):
        name = f"model.layers.{block}.mlp.down_proj.weight"
        assert not torch.equal(before[name], after[name]), name
    assert json.loads((result.path / "training_config.json").read_text())["freeze_layers"] == 2


def test_early_stopping_stops_after_patience_and_keeps_the_full_runs_best_epoch(tmp_path):
    """Top-k over the whole vocabulary is 1.0 at every epoch, so nothing improves after epoch 1:
    with patience 1 the run stops after epoch 2, and its weights are bit for bit those the full
    three-epoch run keeps (its epoch 1, under the same three-epoch schedule)."""
    art = tiny_artifacts()
    vocab = json.loads((art.pretrained / "config.json").read_text())["vocab_size"]
    base = FinetuneConfig(epochs=3, lr=5e-3, mix_ratio=0.0, eval_k=vocab, max_validation_prompts=8, device="cpu")
    full = finetune(art.pretrained, art.relation_data, tmp_path / "full", base, progress=False)
    stopped = finetune(
        art.pretrained,
        art.relation_data,
        tmp_path / "stopped",
        FinetuneConfig(**{**base.__dict__, "early_stopping_patience": 1}),
        progress=False,
    )
    assert full.history == [1.0, 1.0, 1.0] and full.best_epoch == 1
    assert stopped.history == [1.0, 1.0] and stopped.best_epoch == 1
    a, b = load_file(full.path / "model.safetensors"), load_file(stopped.path / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((stopped.path / "training_config.json").read_text())["early_stopping_patience"] == 1
    with pytest.raises(ValueError, match="early_stopping_patience"):
        finetune(
            art.pretrained,
            art.relation_data,
            tmp_path / "x",
            FinetuneConfig(**{**base.__dict__, "early_stopping_patience": 0}),
        )


def test_bad_options_fail_with_the_fix_named(tmp_path):
    art = tiny_artifacts()
    with pytest.raises(ValueError, match="GPU"):
        finetune(
            art.pretrained,
            art.relation_data,
            tmp_path / "x",
            FinetuneConfig(precision="fp16", device="cpu", mix_ratio=0.0),
        )
    with pytest.raises(ValueError, match="general text"):
        finetune(art.pretrained, art.relation_data, tmp_path / "x", FinetuneConfig(mix_ratio=0.3))
    with pytest.raises(ValueError, match="mix_ratio"):
        finetune(art.pretrained, art.relation_data, tmp_path / "x", FinetuneConfig(mix_ratio=1.0))
    assert not (tmp_path / "x").exists()


def test_train_command_mixes_general_text(tmp_path):
    art = tiny_artifacts()
    out = tmp_path / "cli-model"
    result = CliRunner().invoke(
        _app(),
        [
            "train",
            "--model",
            str(art.pretrained),
            "--data",
            str(art.task_data),
            "--out",
            str(out),
            "--epochs",
            "1",
            "--lr",
            "1e-3",
            "--mix-ratio",
            "0.5",
            "--general-text",
            str(art.world_data),
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads((out / "training_config.json").read_text())
    assert record["n_general_texts"] == record["n_train_texts"]  # a 0.5 share
    assert record["lr"] == 1e-3 and record["base_model"] == str(art.pretrained)
    assert "general_loss" not in record  # the token loss, recorded as before the option existed


def test_train_command_learns_general_text_by_kl_when_asked(tmp_path):
    art = tiny_artifacts()
    args = ["train", "--model", str(art.pretrained), "--data", str(art.task_data), "--epochs", "1"]
    args += ["--general-text", str(art.world_data), "--device", "cpu", "--general-loss", "kl"]
    result = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "kl"), "--mix-ratio", "0.5"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "kl" / "training_config.json").read_text())["general_loss"] == "kl"
    refused = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "none")])
    assert refused.exit_code != 0 and "needs mix_ratio > 0" in refused.output


def test_data_command_writes_disjoint_sets_and_reports_user_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        _app(),
        [
            "data",
            "--out",
            str(tmp_path / "d"),
            "--seed",
            "5",
            "--facts-per-kind",
            "3",
            "--relation",
            "4",
            "--task",
            "4",
            "--freetext",
            "1",
            "--texts-per-fact",
            "4",
            "--known",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    relation, task = load_facts(tmp_path / "d" / "relation"), load_facts(tmp_path / "d" / "task")
    assert len(relation) == len(task) == 4 and not {f.id for f in relation} & {f.id for f in task}
    assert load_facts(tmp_path / "d" / "relation_b2a") == relation == load_facts(tmp_path / "d" / "relation_a2b")
    assert load_manifest(tmp_path / "d" / "freetext")["options"]["style"] == "freetext"
    assert {f.kind for f in load_facts(tmp_path / "d" / "known")} == {"real_real"}
    bad = tmp_path / "user.jsonl"
    bad.write_text(json.dumps({"first_actor": "Ada North"}) + "\n")
    result = runner.invoke(_app(), ["data", "--out", str(tmp_path / "u"), "--user-facts", str(bad)])
    assert result.exit_code == 2
    assert "second_actor" in result.output and "line 1" in result.output


def test_pretrain_command_reuses_the_cache():
    art = tiny_artifacts()
    result = CliRunner().invoke(_app(), ["pretrain", "--size", "tiny", "--home", str(tiny_home())])
    assert result.exit_code == 0, result.output
    assert f"pretrained: {art.pretrained}" in result.output
    assert "building" not in result.output


def test_train_out_is_refused_when_occupied_and_overwrite_keeps_the_users_files(tmp_path, monkeypatch):
    """Issue 9 item 1: `train --out DIR` used to replace DIR whole (and `--out .` emptied it)."""
    from data_cli_fixtures import first_line, run_cli

    art = tiny_artifacts()
    (tmp_path / "notes.txt").write_text("mine")
    refused = run_cli(
        "train",
        "--model",
        str(art.pretrained),
        "--data",
        str(art.task_data),
        "--out",
        ".",
        "--epochs",
        "1",
        "--device",
        "cpu",
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    assert first_line(refused.stderr).startswith(f"error: {tmp_path} exists and is not empty; pass --overwrite")
    # The same `--out .` with overwrite, in process (the command is a thin wrapper of finetune).
    monkeypatch.chdir(tmp_path)
    config = FinetuneConfig(epochs=1, mix_ratio=0.0, device="cpu")
    finetune(art.pretrained, art.task_data, ".", config, progress=False, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "training_config.json").is_file()
    assert not [p for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.tmp-")]


def test_without_progress_training_prints_no_loss_lines_and_keeps_its_history(tmp_path, capfd):
    """Trainer replaces disabled progress bars by a printer of every log dict; `progress=False`
    must print none of them, nor transformers' bars (saving the model), while the record still
    holds each epoch's validation."""
    art = tiny_artifacts()
    config = FinetuneConfig(epochs=2, lr=3e-3, mix_ratio=0.0, device="cpu")
    result = finetune(art.pretrained, art.task_data, tmp_path / "quiet", config, progress=False)
    out, err = capfd.readouterr()
    assert "'loss'" not in out + err and "eval_top5_accuracy" not in out + err
    assert "it/s]" not in out + err and "Writing model shards" not in out + err
    record = json.loads((result.path / "training_config.json").read_text())
    assert len(record["validation_top_k_by_epoch"]) == 2 == len(result.history)


def test_reloading_the_best_epoch_of_a_tied_model_reports_nothing_missing(tmp_path):
    """With checkpoints, Trainer reloads the best epoch at the end. A checkpoint of a model whose
    unembedding is its embedding holds the tensor once, and transformers warned that the other
    name was missing (SmolLM2's `lm_head.weight`): it is loaded, so nothing is reported, and the
    saved model still ties the two."""
    import logging

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from weightgraft.training.trainer import tied_names

    art = tiny_artifacts()
    tied = tmp_path / "tied"
    net = AutoModelForCausalLM.from_pretrained(art.pretrained)
    net.config.tie_word_embeddings = True
    net.get_output_embeddings().weight = net.get_input_embeddings().weight
    assert tied_names(net) == {"lm_head.weight"}
    net.save_pretrained(tied)
    AutoTokenizer.from_pretrained(art.pretrained).save_pretrained(tied)
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.addHandler(handler)
    try:
        config = FinetuneConfig(epochs=2, lr=3e-3, mix_ratio=0.0, device="cpu")
        result = finetune(tied, art.task_data, tmp_path / "out", config, progress=False, checkpoint_dir=tmp_path / "ck")
    finally:
        trainer_logger.removeHandler(handler)
    assert not [m for m in messages if "missing keys" in m]
    saved = AutoModelForCausalLM.from_pretrained(result.path)
    assert saved.get_output_embeddings().weight is saved.get_input_embeddings().weight
    assert len(result.history) == 2


def test_eager_and_sdpa_attention_train_the_same_model(tmp_path):
    """The attention kernel is a speed choice: one epoch with each gives the same validation
    accuracy, and weights that moved alike: the kernels sum in another order, and Adam carries the
    rounding on (measured: 2e-5 apart after moving 1.5e-2), so the two may differ by at most 1% of
    how far training moved them."""
    art = tiny_artifacts()
    base = dict(epochs=1, lr=5e-3, mix_ratio=0.0, device="cpu", max_validation_prompts=10, labelled_logits_only=True)
    runs = {
        kernel: finetune(
            art.pretrained,
            art.relation_data,
            tmp_path / kernel,
            FinetuneConfig(**base, attention=kernel),
            progress=False,
        )
        for kernel in ("sdpa", "eager")
    }
    assert runs["sdpa"].history == pytest.approx(runs["eager"].history, abs=1e-9)
    before = load_file(art.pretrained / "model.safetensors")
    sdpa, eager = (load_file(r.path / "model.safetensors") for r in runs.values())
    moved = max((sdpa[n] - before[n]).abs().max().item() for n in sdpa)
    assert moved > 1e-3  # it trained
    assert max((sdpa[n] - eager[n]).abs().max().item() for n in sdpa) < 0.01 * moved
    record = json.loads((runs["eager"].path / "training_config.json").read_text())
    assert record["attention"] == "eager"
    with pytest.raises(Exception, match="attention must be one of sdpa, eager"):
        finetune(
            art.pretrained,
            art.relation_data,
            tmp_path / "bad",
            FinetuneConfig(mix_ratio=0.0, attention="flash"),
            progress=False,
        )
