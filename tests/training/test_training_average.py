"""Weight averaging of finetunes (`training.average`): the numbers, the record, the refusals."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from tiny_model_fixtures import make_model
from training_fixtures import tiny_artifacts
from weightgraft.data.data_errors import DataError
from weightgraft.model_identity import SameModelError
from weightgraft.training.average import average_state, average_weights


def test_each_tensor_is_the_mean_of_the_members_and_the_record_names_them(tmp_path):
    art = tiny_artifacts()
    members = [art.relation_model, art.task_model, art.b2a_model]
    out = average_weights(members, tmp_path / "soup")
    files = [load_file(m / "model.safetensors") for m in members]
    averaged = load_file(out / "model.safetensors")
    assert set(averaged) == set(files[0])
    for name, tensor in averaged.items():
        expected = (files[0][name].double() + files[1][name].double() + files[2][name].double()) / 3
        assert torch.equal(tensor, expected.float()), name
    moved = "model.layers.3.mlp.down_proj.weight"
    assert not torch.equal(averaged[moved], files[0][moved])  # the members differ, so the mean is new
    record = json.loads((out / "training_config.json").read_text())
    assert record["kind"] == "weight_average" and record["members"] == [str(m) for m in members]
    assert record["base_model"] == str(art.pretrained)
    assert [r["data_dir"] for r in record["member_records"]] == [
        str(d) for d in (art.relation_data, art.task_data, art.b2a_data)
    ]
    # The folder is a model like any other: it loads and its logits are the averaged weights'.
    net = AutoModelForCausalLM.from_pretrained(out)
    reference = AutoModelForCausalLM.from_pretrained(members[0])
    reference.load_state_dict({name: averaged[name] for name in reference.state_dict()})
    ids = torch.tensor([[1, 5, 9, 12]])
    assert torch.equal(net(ids).logits, reference(ids).logits)


def test_a_state_averaged_with_itself_is_itself_but_a_model_given_twice_is_refused(tmp_path):
    """The mean is exact (a state averaged with itself comes back bit for bit); a model folder
    given twice, or a copy of it, is refused: "the mean of 2 models" would be one model."""
    model = tiny_artifacts().relation_model
    before = load_file(model / "model.safetensors")
    after = average_state([before, before])
    assert all(torch.equal(before[name], after[name]) for name in before)
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    with pytest.raises(SameModelError, match="identical weight and config files.*averaging a model with itself"):
        average_weights([model, copy], tmp_path / "soup")
    assert not (tmp_path / "soup").exists()


def test_tied_embeddings_stay_tied(tmp_path):
    folders = []
    for seed in (0, 1):
        net = make_model("gpt2", seed)
        net.save_pretrained(tmp_path / f"m{seed}")
        folders.append(tmp_path / f"m{seed}")
    out = average_weights(folders, tmp_path / "soup")
    net = AutoModelForCausalLM.from_pretrained(out)
    assert net.get_output_embeddings().weight is net.get_input_embeddings().weight
    a, b = (make_model("gpt2", seed).transformer.wte.weight.detach() for seed in (0, 1))
    assert torch.allclose(net.transformer.wte.weight, (a + b) / 2, atol=0, rtol=0)


def test_bad_members_are_refused_with_the_fix(tmp_path):
    art = tiny_artifacts()
    with pytest.raises(DataError, match="two or more models"):
        average_weights([art.relation_model], tmp_path / "a")
    with pytest.raises(DataError, match="not a model folder"):
        average_weights([art.relation_model, tmp_path / "missing"], tmp_path / "b")
    # Two models of different shapes: the config differences are named.
    for name, arch, overrides in (("small", "llama", {}), ("wide", "llama", {"intermediate_size": 32})):
        make_model(arch, 0, **overrides).save_pretrained(tmp_path / name)
    with pytest.raises(DataError, match="intermediate_size.*one base model"):
        average_weights([tmp_path / "small", tmp_path / "wide"], tmp_path / "c")
    # Finetunes whose records name different base models.
    other = tmp_path / "other-base"
    shutil.copytree(art.task_model, other)
    record = json.loads((other / "training_config.json").read_text())
    (other / "training_config.json").write_text(json.dumps(record | {"base_model": "somewhere/else"}))
    with pytest.raises(DataError, match="different base models"):
        average_weights([art.relation_model, other], tmp_path / "d")
    # One base named by two paths is one base.
    relative = tmp_path / "relative-base"
    shutil.copytree(art.task_model, relative)
    record = json.loads((relative / "training_config.json").read_text())
    (relative / "training_config.json").write_text(
        json.dumps(record | {"base_model": str(art.pretrained / ".." / art.pretrained.name)})
    )
    assert average_weights([art.relation_model, relative], tmp_path / "same-base").is_dir()
    # A model that asks to run its own code is refused unless allowed.
    custom = tmp_path / "custom-code"
    shutil.copytree(art.task_model, custom)
    config = json.loads((custom / "config.json").read_text())
    (custom / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModelForCausalLM": "m.Model"}}))
    with pytest.raises(Exception, match="own Python code.*trust-remote-code"):
        average_weights([art.relation_model, custom], tmp_path / "f")
    # A non-empty output folder is kept unless --overwrite.
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="--overwrite"):
        average_weights([art.relation_model, art.task_model], tmp_path / "e")
    assert not (tmp_path / "e" / "model.safetensors").exists()
    assert not any((tmp_path / name).exists() for name in ("a", "b", "c", "d", "f"))


def test_average_command_writes_the_mean_and_reports_a_refusal_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from weightgraft.cli import _register_all, app

    _register_all()
    art = tiny_artifacts()
    ok = CliRunner().invoke(
        app, ["average", str(art.relation_model), str(art.task_model), "--out", str(tmp_path / "m")]
    )
    assert ok.exit_code == 0, ok.output
    assert "the mean of 2 models" in ok.output
    name = "model.layers.0.self_attn.o_proj.weight"
    expected = (
        load_file(art.relation_model / "model.safetensors")[name].double()
        + load_file(art.task_model / "model.safetensors")[name].double()
    ) / 2
    assert torch.equal(load_file(tmp_path / "m" / "model.safetensors")[name], expected.float())
    refused = CliRunner().invoke(app, ["average", str(art.relation_model), "--out", str(tmp_path / "n")])
    assert refused.exit_code != 0 and "two or more models" in refused.output
    assert "Traceback" not in refused.output


def test_weights_interpolate_a_finetune_towards_its_base_model(tmp_path):
    """`--weights 0.3,0.7` of PRE and a finetune is PRE + 0.7 (SFT - PRE), tensor by tensor; the
    record keeps the weights; weights of the wrong count or sum, or not numbers, are refused in
    one line naming the fix, before anything is written."""
    from typer.testing import CliRunner

    from weightgraft.cli import _register_all, app

    _register_all()
    art = tiny_artifacts()
    ok = CliRunner().invoke(
        app,
        ["average", str(art.pretrained), str(art.relation_model), "--weights", "0.3,0.7", "--out", str(tmp_path / "m")],
    )
    assert ok.exit_code == 0, ok.output
    assert "the weighted mean (0.3,0.7) of 2 models" in ok.output
    pre, sft = load_file(art.pretrained / "model.safetensors"), load_file(art.relation_model / "model.safetensors")
    got = load_file(tmp_path / "m" / "model.safetensors")
    for name in ("model.layers.0.self_attn.o_proj.weight", "model.layers.3.mlp.down_proj.weight"):
        update = sft[name].double() - pre[name].double()
        assert not torch.equal(got[name], pre[name]) and not torch.equal(got[name], sft[name])
        torch.testing.assert_close(got[name].double(), pre[name].double() + 0.7 * update, rtol=0, atol=1e-6)
    assert json.loads((tmp_path / "m" / "training_config.json").read_text())["weights"] == [0.3, 0.7]
    # weights of 1 and 0 give the first model back, bit for bit
    assert all(torch.equal(v, pre[k]) for k, v in average_state([pre, sft], [1.0, 0.0]).items())
    for bad, says in (("0.5,0.6", "sum to 1.1, not 1"), ("1", "1 weights for 2 models"), ("a,b", "numbers separated")):
        refused = CliRunner().invoke(
            app,
            ["average", str(art.pretrained), str(art.relation_model), "--weights", bad, "--out", str(tmp_path / "n")],
        )
        assert refused.exit_code == 2 and says in refused.output, refused.output
        assert "Traceback" not in refused.output and not (tmp_path / "n").exists()
