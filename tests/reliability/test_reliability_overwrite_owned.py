"""`--overwrite` replaces only the files the command recorded writing, in subfolders too, and
never the command's own input (issue 41, items 4, 5 and 6)."""

from __future__ import annotations

from pathlib import Path

from cli_runner import invoke, one_line_error
from ownership_fixtures import SMALL, snapshot


def no_training(monkeypatch) -> list:
    from weightgraft.training import finetune

    calls = []
    monkeypatch.setattr(finetune, "_train", lambda *a, **k: calls.append(a))
    return calls


def train_args(world, model, out: Path, *more: str) -> list[str]:
    return ["train", "--model", str(model), "--data", str(world["built"]), "--out", str(out), "--epochs", "1", *more]


# ---- item 4: a user's file that shares a name with an output -----------------------------------
def test_data_overwrite_refuses_a_users_file_of_an_outputs_name_and_names_it(tmp_path):
    out = tmp_path / "U"
    mine = out / "relation" / "eval.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text("my own evaluation\n")
    line = one_line_error(invoke("data", "--out", out, *SMALL, "--overwrite"))
    assert f"{mine} is not a file weightgraft recorded writing" in line
    assert mine.read_text() == "my own evaluation\n"
    assert sorted(p.name for p in (out / "relation").iterdir()) == ["eval.jsonl"]  # nothing moved in


def test_train_overwrite_refuses_a_users_model_files_before_training(world, tmp_path, monkeypatch):
    out = tmp_path / "UM"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"my weights")
    (out / "config.json").write_text('{"mine": true}')
    before, trained = snapshot(out), no_training(monkeypatch)
    line = one_line_error(invoke(*train_args(world, world["models"]["pre"], out, "--overwrite", "--device", "cpu")))
    assert f"{out / 'model.safetensors'} is not a file weightgraft recorded writing" in line
    assert snapshot(out) == before and not trained


def test_data_overwrite_still_replaces_its_own_files_and_keeps_a_users_file_beside_them(tmp_path):
    out = tmp_path / "D"
    assert invoke("data", "--out", out, *SMALL).code == 0
    (out / "relation" / "my_notes.txt").write_text("mine")
    assert invoke("data", "--out", out, *SMALL, "--seed", "1", "--overwrite").code == 0
    assert (out / "relation" / "my_notes.txt").read_text() == "mine"


# ---- item 5: a run's subfolders ------------------------------------------------------------------
def test_run_overwrite_keeps_a_users_files_inside_plots_and_examples(world, tmp_path):
    out = tmp_path / "R"
    assert invoke("run", world["root"] / "a.yaml", "--out", out, "--no-progress").code == 0
    figure, notebook = out / "plots" / "my_figure_edited.png", out / "examples" / "my_analysis.ipynb"
    figure.parent.mkdir(exist_ok=True)
    figure.write_bytes(b"my figure")
    notebook.write_text("{}")
    assert invoke("run", world["root"] / "b.yaml", "--out", out, "--no-progress", "--overwrite").code == 0
    assert figure.read_bytes() == b"my figure" and notebook.read_text() == "{}"
    assert sorted(p.name for p in (out / "examples").iterdir() if not p.name.startswith(".")) == [
        "f",
        "my_analysis.ipynb",
    ]
    assert not (out / "state" / "e.json").exists()  # the old run's own files are gone


# ---- item 6: the command's own input -------------------------------------------------------------
def test_average_over_its_own_member_is_refused(world, tmp_path):
    pre, sft = world["models"]["pre"], world["models"]["sft"]
    before = snapshot(Path(pre))
    line = one_line_error(invoke("average", pre, sft, "--out", pre, "--overwrite"))
    assert f"--out {pre} is the command's own input model 1" in line
    assert snapshot(Path(pre)) == before


def test_train_over_its_own_model_is_refused_before_training(world, tmp_path, monkeypatch):
    pre = world["models"]["pre"]
    before, trained = snapshot(Path(pre)), no_training(monkeypatch)
    line = one_line_error(invoke(*train_args(world, pre, Path(pre), "--overwrite", "--device", "cpu")))
    assert f"--out {pre} is the command's own input --model" in line
    assert snapshot(Path(pre)) == before and not trained
