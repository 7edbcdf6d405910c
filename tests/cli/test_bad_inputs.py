"""Bad input is one line and exit code 2, checked before any model loads where it can be (issue
17): a full disk, prompts past the model's context, model folders without tokenizer or with a
missing tensor, numeric options and devices read at parse time, a hand-edited span, a component
the architecture lacks, over-long run names, YAML bombs, and config errors naming their field."""

from __future__ import annotations

import pytest

from bad_input_fixtures import EXPERIMENT, build_world, edited_dataset, fill_the_disk, write_config
from cli_runner import invoke, one_line_error


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("bad_inputs"))


def test_a_full_disk_is_one_line_and_leaves_no_folder(monkeypatch, tmp_path):
    fill_the_disk(monkeypatch)
    line = one_line_error(invoke("data", "--out", tmp_path / "d", "--facts-per-kind", 4, "--relation", 4, "--task", 0))
    assert "no space left on the device while writing" in line and "free some space" in line
    assert not (tmp_path / "d").exists()


def test_prompts_past_gpt2_context_are_refused_before_the_forward(world, tmp_path):
    models = {"pre": str(world["gpt2_pre"]), "sft": str(world["gpt2_sft"])}
    config = write_config(tmp_path / "c.yaml", world, models=models)
    line = one_line_error(invoke("run", config, "--out", tmp_path / "run"))
    assert "longer than the model's context of 4 tokens" in line and "experiment 'e'" in line


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--epochs", "0"], "'--epochs'"),
        (["train", "--batch", "0"], "'--batch'"),
        (["train", "--lr", "-1"], "'--lr': -1.0 is not above 0"),
        (["train", "--device", "banana"], "'--device': 'banana' is not a device"),
        (["localize", "--target", "1.5"], "'--target': 1.5 is not in (0, 1]"),
        (["localize", "--batch-size", "0"], "'--batch-size'"),
        (["reproduce", "--epochs", "0"], "'--epochs'"),
        (["reproduce", "--device", "gpu"], "'--device': 'gpu' is not a device"),
    ],
)
def test_numeric_options_and_devices_are_checked_as_the_line_is_read(args, fragment, tmp_path):
    rest = {
        "train": ["--model", "m", "--data", tmp_path, "--out", tmp_path / "o"],
        "localize": [],
        "reproduce": ["--model", "m", "--out", tmp_path / "o", "--dry-run"],
    }[args[0]]
    line = one_line_error(invoke(*args, *rest))
    assert fragment in line


def test_train_refuses_a_model_folder_without_tokenizer(world, tmp_path):
    line = one_line_error(
        invoke("train", "--model", world["no_tokenizer"], "--data", world["built"], "--out", tmp_path / "o")
    )
    assert "--model: no usable tokenizer" in line and "tokenizer.save_pretrained" in line


def test_train_refuses_a_checkpoint_that_lacks_a_tensor(world, tmp_path):
    line = one_line_error(
        invoke("train", "--model", world["lacking"], "--data", world["built"], "--out", tmp_path / "o")
    )
    assert "model.layers.1.mlp.up_proj.weight" in line and "lacks 1 tensor" in line
    assert not (tmp_path / "o").exists()


def test_reproduce_refuses_a_model_folder_without_tokenizer(world, tmp_path):
    line = one_line_error(invoke("reproduce", "--model", world["no_tokenizer"], "--out", tmp_path / "j", "--dry-run"))
    assert "--model: no usable tokenizer" in line


def test_a_span_past_the_text_is_refused_before_models_load(world, tmp_path):
    def stretch(record):
        role = next(iter(record["spans"]))
        record["spans"][role]["end"] = len(record["text"]) + 5

    data = edited_dataset(world, tmp_path / "data", stretch)
    config = write_config(tmp_path / "c.yaml", world, datasets={"relation": str(data)})
    line = one_line_error(invoke("run", config, "--out", tmp_path / "run"))
    assert "eval.jsonl: a record is invalid" in line and "does not lie inside the text" in line


def test_a_component_the_architecture_lacks_is_found_before_models_load(world, tmp_path, monkeypatch):
    import weightgraft.experiments.models as models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    experiment = dict(EXPERIMENT, conditions=[{"name": "qn", "grafts": [{"positions": "FE", "components": "q_norm"}]}])
    config = write_config(tmp_path / "c.yaml", world, experiments=[experiment])
    line = one_line_error(invoke("run", config, "--out", tmp_path / "run"))
    assert "condition 'qn'" in line and "(llama) has no component(s) ['q_norm']" in line


def test_run_names_are_bounded_to_what_a_file_system_takes(world, tmp_path):
    for name, fragment in (("x" * 300, "300 characters is too long"), ("a:b", "characters a file name cannot")):
        line = one_line_error(invoke("run", write_config(tmp_path / "c.yaml", world, name=name)))
        assert "name:" in line and fragment in line


def test_yaml_bombs_and_huge_configs_are_refused(tmp_path):
    rows = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    rows += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(rows) + "\n")
    line = one_line_error(invoke("run", tmp_path / "bomb.yaml"))
    assert "aliases expand to more than 100000 values" in line
    (tmp_path / "big.yaml").write_text("# padding\n" * 200_000)
    line = one_line_error(invoke("run", tmp_path / "big.yaml"))
    assert "too large for a run config" in line


def test_a_config_error_names_the_field_to_fix_first(world, tmp_path):
    experiment = dict(EXPERIMENT, conditions=[{"name": "c", "grafts": [{"positions": "FE", "layerz": 1}]}])
    line = one_line_error(invoke("run", write_config(tmp_path / "c.yaml", world, experiments=[experiment])))
    assert "unknown field 'layerz' at experiments.0.conditions.0.grafts.0" in line


def test_span_and_target_errors_are_user_errors_and_value_errors():
    from weightgraft.data.encode import SpanMappingError
    from weightgraft.errors import UserError

    assert issubclass(SpanMappingError, UserError) and issubclass(SpanMappingError, ValueError)
