"""Minimal graft search on tiny Llamas with known answers, the exact-effect helper, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tiny_model_fixtures import tiny_llama
from tiny_world import build_tokenizer, make_prompts
from weightgraft import Graft, Grafter
from weightgraft.attribution import attribute, encode_role_examples, exact_cell_effects, localize, spearman
from weightgraft.attribution.localize import _evaluate, _size_schedule
from weightgraft.cli import _register_all, app


def _llama(seed: int, vocab: int):
    return tiny_llama(vocab, seed)


@pytest.fixture(scope="module")
def world():
    tokenizer = build_tokenizer()
    examples = encode_role_examples(tokenizer, make_prompts())
    recipient = _llama(0, len(tokenizer))
    return tokenizer, examples, recipient


def _unembedding_donor(recipient, examples):
    """The recipient with each target's unembedding row pushed along its prompts' final hidden
    states: only the lm_head at the last token changes the prediction, by construction."""
    import copy

    donor = copy.deepcopy(recipient)
    with torch.no_grad():
        for example in examples:
            ids = torch.tensor([example.input_ids])
            hidden = recipient.model(input_ids=ids).last_hidden_state[0, -1]
            donor.lm_head.weight[example.target_id] += 3.0 * hidden / hidden.norm() ** 2
    return donor


def test_localize_finds_the_one_group_that_carries_a_known_gain(world):
    _, examples, recipient = world
    donor = _unembedding_donor(recipient, examples)
    grafter = Grafter(recipient, donor)
    result = localize(grafter, examples, target=0.9, sizes_per_pass=4)
    with pytest.raises(ValueError, match="stop_on must name"):
        localize(grafter, examples, stop_on=["top1"])
    assert result.groups[0] == ("LT", None, "lm_head")
    assert result.reached and result.chosen == [("LT", None, "lm_head")]
    first = result.curve[0]
    assert first["recovery_top5"] == pytest.approx(1.0) and first["recovery_prob"] == pytest.approx(1.0)
    assert result.baselines["FE+LT"]["recovery_prob"] == pytest.approx(1.0)
    # Every other group's cells leave the last token's logits alone: attribution exactly 0 (the
    # donor differs only in lm_head, so every other cell's donor - recipient difference is 0, and
    # lm_head elsewhere than the last token has a gradient of exactly 0).
    assert all(s == 0 for s in result.scores[1:])
    assert result.counts["chosen_cells_per_prompt"] == 1.0
    per_position = 2 * 9 + 3  # 2 layers x 9 components + 3 model-level components
    fe_tokens = np.mean([len(e.roles["FE"]) for e in examples])
    assert result.counts["fe_lt_cells_per_prompt"] == pytest.approx(per_position * (fe_tokens + 1))


def test_localize_curve_equals_independent_exact_grafts(world):
    _, examples, recipient = world
    donor = _unembedding_donor(recipient, examples)
    noise = _llama(1, recipient.config.vocab_size)
    with torch.no_grad():  # and changed a little everywhere, so that many groups matter
        for p, q in zip(donor.parameters(), noise.parameters()):
            p.add_(q, alpha=0.3)
    grafter = Grafter(recipient, donor)
    pre, sft = _evaluate(grafter, examples, [[[] for _ in examples], [[Graft()] for _ in examples]], 8)
    assert sft["top5"] > pre["top5"] and sft["prob"] > pre["prob"]
    result = localize(grafter, examples, target=0.999, sizes_per_pass=16, max_groups=12, stop_on=["prob"])
    for entry in result.curve[:12:5]:
        k = entry["k"]
        ranks, probs = [], []
        for example in examples:  # one Graft per group, built here, not by localize
            grafts = [
                Graft(example.roles[r], [0 if layer is None else layer], [c])
                for r, layer, c in result.groups[:k]
                if r in example.roles
            ]
            logits = grafter.last_logits(torch.tensor([example.input_ids]), grafts=grafts or None)[0]
            ranks.append(int((logits > logits[example.target_id]).sum()) + 1)
            probs.append(float(torch.softmax(logits, -1)[example.target_id]))
        assert entry["top5"] == pytest.approx(np.mean(np.array(ranks) <= 5))
        # float32: localize scores a padded batch, this loop one prompt at a time (measured 2e-7
        # relative); the recovery divides by sft - pre, which can magnify that, hence 1e-4.
        assert entry["prob"] == pytest.approx(np.mean(probs), rel=1e-5)
        assert entry["recovery_prob"] == pytest.approx(
            (np.mean(probs) - pre["prob"]) / (sft["prob"] - pre["prob"]), rel=1e-4
        )
    assert _size_schedule(40, 16) == list(range(1, 17)) + [20, 25, 31, 39, 40]
    assert _size_schedule(5, 16) == [1, 2, 3, 4, 5]
    # The stopping rule: the chosen size is the first that reaches the target on both metrics.
    passing = [e["k"] for e in result.curve if e["recovery_prob"] >= 0.999]
    assert result.reached == bool(passing)
    assert result.chosen == (result.groups[: passing[0]] if passing else [])
    assert not result.reached or result.curve[-1]["k"] < passing[0] + 16


def test_exact_cell_effects_match_single_grafts_and_spearman_is_right():
    recipient, donor = _llama(3, 40), _llama(4, 40)
    grafter = Grafter(recipient, donor)
    ids = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    cells = [(0, 4, None, "lm_head"), (1, 1, 0, "q"), (0, 2, 1, "down"), (1, 2, None, "embed")]
    got = exact_cell_effects(grafter, ids, [3, 4], cells, attention_mask=mask)
    for (row, pos, layer, comp), value in zip(cells, got):
        n = int(mask[row].sum())
        one = ids[row : row + 1, :n]
        graft = Graft([pos], [0 if layer is None else layer], [comp])
        target = [3, 4][row]
        expected = (
            torch.log_softmax(grafter.last_logits(one, grafts=graft)[0], -1)[target]
            - torch.log_softmax(grafter.last_logits(one)[0], -1)[target]
        )
        # float32: a padded batch with prefix sharing vs one row alone (measured: equal here);
        # 1e-5 nats allows for rounding differences between those shapes
        assert float(value) == pytest.approx(float(expected), abs=1e-5)
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / 10**0.5)  # ties: average ranks
    # Gradient attribution ranks these cells like their exact effects (a tiny sanity check).
    attr = attribute(grafter, ids, [3, 4], attention_mask=mask)
    assert attr.model_level[0, 4, attr.model_components.index("lm_head")] != 0


def test_localize_command_writes_results_and_pictures(world, tmp_path):
    tokenizer, examples, recipient = world
    donor = _unembedding_donor(recipient, examples)
    for name, model in (("pre", recipient), ("sft", donor)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    data = tmp_path / "data"
    data.mkdir()
    (data / "eval.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in make_prompts()))
    out = tmp_path / "out"
    _register_all()
    args = [
        "localize",
        "--recipient",
        str(tmp_path / "pre"),
        "--donor",
        str(tmp_path / "sft"),
        "--data",
        str(data),
        "--out",
        str(out),
        "--check-cells",
        "2",
        "--no-progress",
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "minimal set: 1 groups" in done.output
    summary = json.loads((out / "localize.json").read_text())
    assert summary["chosen"] == [{"role": "LT", "layer": None, "component": "lm_head"}]
    assert summary["agreement"]["cells"] > 10
    for name in ("heatmaps.png", "recovery.png", "positions.png", "tokens.html", "cells.parquet"):
        assert (out / name).stat().st_size > 0, name
    assert ">Who</span>" in (out / "tokens.html").read_text()
    missing = CliRunner().invoke(app, ["localize", "--recipient", "x"])
    assert missing.exit_code == 2 and "--builtin default" in missing.output


def test_localize_command_passes_every_flag_to_the_library(tmp_path, monkeypatch):
    """The command parses options and calls `localize_to_folder`: every flag arrives there."""
    import weightgraft.cli.localize_commands as command
    from weightgraft.errors import UserError

    seen = {}

    def spy(pair, data, split, settings, out, progress):
        seen.update(pair=pair, data=data, split=split, settings=settings, out=out, progress=progress)
        raise UserError("stopped by the test")

    _register_all()
    monkeypatch.setattr(command, "localize_to_folder", spy)
    args = ["localize", "--recipient", "r", "--donor", "d", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    args += ["--split", "validation", "--method", "integrated", "--steps", "3", "--target", "0.5"]
    args += ["--stop-on", "prob", "--max-examples", "7", "--check-cells", "2", "--batch-size", "5", "--seed", "4"]
    args += ["--device", "cuda:1", "--dtype", "bfloat16", "--no-progress"]
    args += ["--trust-remote-code", "--allow-config-difference", "rope_theta", "--allow-config-difference", "x"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2 and "stopped by the test" in done.output
    pair, settings = seen["pair"], seen["settings"]
    assert (pair.recipient, pair.donor, pair.device, pair.dtype) == ("r", "d", "cuda:1", "bfloat16")
    assert pair.trust_remote_code and pair.allow_config_differences == ("rope_theta", "x")
    assert pair.labels == ("--recipient", "--donor")
    assert (settings.method, settings.steps, settings.target, tuple(settings.stop_on)) == (
        "integrated",
        3,
        0.5,
        ("prob",),
    )
    assert (settings.max_examples, settings.check_cells, settings.batch_size, settings.seed) == (7, 2, 5, 4)
    assert (seen["data"], seen["split"], seen["out"], seen["progress"]) == (
        tmp_path,
        "validation",
        tmp_path / "o",
        False,
    )
    seen.clear()
    assert CliRunner().invoke(app, args[:9]).exit_code == 2
    defaults = seen["pair"]  # neither remote code nor config differences unless asked
    assert not defaults.trust_remote_code and defaults.allow_config_differences == ()
    assert (defaults.device, defaults.dtype, seen["settings"].method, seen["progress"]) == (
        "cpu",
        "float32",
        "gradient",
        True,
    )


def test_localize_command_allows_config_differences_only_when_asked(world, tmp_path):
    """Models whose norm epsilon differs: refused in one line, searched with --allow-config-difference rms_norm_eps
    (the flag reaches the Grafter, as `allow_config_differences` does in a run config)."""
    tokenizer, examples, recipient = world
    donor = _unembedding_donor(recipient, examples)
    donor.config.rms_norm_eps = 1e-3
    for name, model in (("pre", recipient), ("sft", donor)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    data = tmp_path / "data"
    data.mkdir()
    (data / "eval.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in make_prompts()))
    _register_all()
    args = ["localize", "--recipient", str(tmp_path / "pre"), "--donor", str(tmp_path / "sft"), "--data", str(data)]
    args += ["--no-progress", "--max-examples", "4"]
    refused = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "refused")])
    assert refused.exit_code == 2
    assert refused.output.startswith("error: --recipient and --donor cannot be grafted"), refused.output
    assert len(refused.output.strip().splitlines()) == 1
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--allow-config-difference", "rms_norm_eps"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "out" / "localize.json").is_file()


def test_localize_experiment_in_a_run_config_reports_and_is_reused(world, tmp_path):
    from weightgraft.experiments.config import ConfigError, parse_config
    from weightgraft.pipelines.run import run_all
    from weightgraft.reporting.localize_results import LocalizeSummary
    from weightgraft.reporting.localize_section import localize_section

    tokenizer, examples, recipient = world
    donor = _unembedding_donor(recipient, examples)
    for name, model in (("pre", recipient), ("sft", donor)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    data = tmp_path / "data"
    data.mkdir()
    (data / "eval.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in make_prompts()))
    config = parse_config(
        {
            "models": {"pre": str(tmp_path / "pre"), "sft": str(tmp_path / "sft")},
            "datasets": {"relation": str(data)},
            "bootstrap": 50,
            "experiments": [
                {
                    "name": "baseline",
                    "dataset": "relation",
                    "recipient": "pre",
                    "donor": "sft",
                    "conditions": ["PRE", "SFT"],
                    "max_examples": 3,
                },
                {"localize": "minimal", "dataset": "relation", "max_examples": 6},
            ],
        }
    )
    with pytest.raises(ConfigError, match="beside at least one grafting experiment"):
        parse_config(
            {**config.model_dump(exclude_defaults=True), "experiments": [{"localize": "x", "dataset": "relation"}]}
        )
    out = tmp_path / "run"
    run_all(config, out, progress=False)
    summary = json.loads((out / "localize" / "minimal" / "localize.json").read_text())
    assert summary["chosen"] == [{"role": "LT", "layer": None, "component": "lm_head"}]
    assert summary["examples"] == 6
    assert (
        summary["intervals"]["chosen"]["prob"]["low"]
        <= summary["recovery"]["prob"]
        <= summary["intervals"]["chosen"]["prob"]["high"]
    )
    report = (out / "report.md").read_text()
    assert "## Minimal graft: minimal" in report and "localize/minimal/recovery.png" in report
    found = {"minimal": LocalizeSummary.read(out / "localize" / "minimal" / "localize.json")}
    assert localize_section(found)[0] == "## Minimal graft: minimal"
    stamp = (out / "localize" / "minimal" / "localize.json").stat().st_mtime_ns
    run_all(config, out, progress=False)  # same settings and models: reused, not recomputed
    assert (out / "localize" / "minimal" / "localize.json").stat().st_mtime_ns == stamp


def _one_head_donor(recipient, examples, layer: int, head: int):
    """The recipient with head `head` of the last layer's o_proj writing each prompt's target
    direction at its last token: only that head, at that token, changes the prediction."""
    import copy

    donor = copy.deepcopy(recipient)
    width = recipient.config.hidden_size // recipient.config.num_attention_heads
    cols = slice(head * width, (head + 1) * width)
    seen = {}
    o_proj = recipient.model.layers[layer].self_attn.o_proj
    handle = o_proj.register_forward_hook(lambda m, args, out: seen.__setitem__("z", args[0][0, -1, cols].detach()))
    try:
        with torch.no_grad():
            for example in examples:
                ids = torch.tensor([example.input_ids])
                hidden = recipient.model(input_ids=ids).last_hidden_state[0, -1]
                direction = recipient.lm_head.weight[example.target_id] * recipient.model.norm.weight
                push = 4.0 * hidden.norm() * direction / direction.norm()
                z = seen["z"]
                donor.model.layers[layer].self_attn.o_proj.weight[:, cols] += torch.outer(push, z) / z.norm() ** 2
    finally:
        handle.remove()
    return donor


def test_localize_at_head_grain_finds_the_one_head(world):
    from weightgraft.attribution.localize import _grafts_for

    _, examples, recipient = world
    donor = _one_head_donor(recipient, examples, layer=1, head=2)
    grafter = Grafter(recipient, donor)
    result = localize(grafter, examples, target=0.9, sizes_per_pass=4, grain="head")
    assert result.groups[0] == ("LT", 1, "o#2")
    # every other head's columns and every other component are the recipient's, and layer 1 is
    # the last, so nothing else moves the last token: scores exactly 0
    assert all(s == 0 for s in result.scores[1:])
    assert result.reached and result.chosen == [("LT", 1, "o#2")]
    assert result.curve[0]["recovery_prob"] == pytest.approx(1.0, abs=1e-5)
    labels = {g[2] for g in result.groups}
    assert {"q#3", "k#1", "v#0", "o#0", "up", "ln1"} <= labels and "o" not in labels and "k#2" not in labels
    # every group at once is the donor everywhere (every head of a layer is the whole component)
    ids = torch.tensor([examples[0].input_ids])
    everything = grafter.logits(ids, _grafts_for(examples[0], result.groups))
    assert torch.equal(everything, grafter.logits(ids, Graft()))
    with pytest.raises(ValueError, match="grain must be one of"):
        localize(grafter, examples, grain="heads")


def test_localize_at_neuron_grain_ranks_neurons(world):
    _, examples, recipient = world
    donor = _one_head_donor(recipient, examples, layer=1, head=2)
    with torch.no_grad():
        donor.model.layers[0].mlp.down_proj.weight[:, 5] += 0.5  # one neuron's write changes too
    result = localize(Grafter(recipient, donor), examples[:4], grain="neuron", target=0.5)
    assert result.groups[0] == ("LT", 1, "o")  # o stays whole at neuron grain
    scores = dict(zip(result.groups, result.scores))
    assert scores[("LT", 0, "down#5")] != 0
    assert all(g[2].partition("#")[0] != "down" or g[2] == "down#5" or s == 0 for g, s in scores.items() if g[1] == 0)
    assert not any(g[2] in ("gate", "up", "down") for g in result.groups)
