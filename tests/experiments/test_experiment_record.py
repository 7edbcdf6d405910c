"""The typed record of an experiment (`experiments.record.ExperimentRecord`): a real run's state
files (a whole run's and a shard's) read back and written again byte for byte, equal to the
record built from the plan; older files read with their defaults; and the summary and report
reading each experiment's record once."""

from __future__ import annotations

import json

import pytest

from exp_fixtures import build_models
from tiny_world import base_config, write_dataset
from weightgraft.experiments import run_folder
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.execute import Resources
from weightgraft.experiments.plan import build_plan
from weightgraft.experiments.record import ExperimentRecord, GraftRecord, MergedPlan
from weightgraft.pipelines import run as run_pipeline
from weightgraft.reporting.report import experiment_table, layers_used
from weightgraft.reporting.summary import build_summary
from weightgraft.runtime import sha256_file

QKV = {"name": "qkv FE late", "grafts": [{"positions": "FE", "layers": "last_half", "components": ["q", "k", "v"]}]}
EXPERIMENT = {
    "name": "rec",
    "title": "Record test",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "conditions": ["PRE", "SFT", QKV],
}
NAMES = ["PRE", "SFT", "qkv FE late"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("record")
    paths, data = build_models(root / "models", layers=2), write_dataset(root / "data")
    # small batches: a shard holds some of them, not all
    cfg = parse_config(dict(base_config(paths, data, [EXPERIMENT]), bootstrap=20, max_batch_tokens=150))
    out = root / "run"
    run_pipeline.run_all(cfg, out, progress=False, report=False)
    run_pipeline.run_all(cfg, root / "shards", progress=False, report=False, shard=(0, 2))
    return cfg, out, root / "shards"


def test_a_whole_run_state_file_round_trips_byte_for_byte(world):
    cfg, out, _ = world
    path = run_folder.state_file(out, "rec")
    record = ExperimentRecord.read(out, "rec")
    assert record.dumps() == path.read_text()
    assert ExperimentRecord.from_json(json.loads(path.read_text())) == record
    # what it says: the run's plan, and the sha256 of the files written
    assert (record.name, record.title, record.num_layers, record.tied_embeddings) == ("rec", "Record test", 2, False)
    assert [c.name for c in record.conditions] == NAMES
    assert record.conditions[2].grafts == (GraftRecord("FE", "last_half", ("q", "k", "v"), "sft", layer_indices=(1,)),)
    assert record.shard is None and record.merged is None
    for cond in record.conditions:
        file = run_folder.condition_file(out, "rec", cond.name)
        assert cond.file == file.name and record.result_sha256[file.name] == sha256_file(file)
    (plan,) = build_plan(cfg, Resources(cfg)).experiments
    assert ExperimentRecord.from_plan(plan).with_results(record.result_sha256) == record


def test_a_shard_state_file_round_trips_with_what_the_merge_needs(world):
    cfg, _, shards = world
    path = run_folder.state_file(shards, "rec", (0, 2))
    record = ExperimentRecord.read(shards, "rec", (0, 2))
    assert record.dumps() == path.read_text()
    (plan,) = build_plan(cfg, Resources(cfg), (0, 2)).experiments
    assert record.shard == (0, 2)
    assert record.merged == MergedPlan(
        tuple(e.prompt.id for e in plan.examples), plan.whole_fingerprints, plan.digest()
    )
    assert record.examples == tuple(e.prompt.id for e in plan.my_examples())
    assert len(record.examples) < len(record.merged.examples)


def test_an_older_state_file_reads_with_the_report_defaults(world):
    _, out, _ = world
    body = json.loads(run_folder.state_file(out, "rec").read_text())
    for key in ("fidelity", "wording", "tied_embeddings", "available_examples", "result_sha256"):
        body.pop(key)
    for cond in body["conditions"]:
        for graft in cond["grafts"]:
            graft.pop("layer_indices")
    old = ExperimentRecord.from_json(body)
    assert (old.fidelity, old.wording, old.tied_embeddings, old.available_examples) == ("", "clean", None, 0)
    assert old.conditions[2].grafts[0].layer_indices is None and old.result_sha256 == {}
    assert "tied_embeddings" not in old.to_json() and layers_used(old) == ""


def test_the_report_reads_the_record(world):
    cfg, out, _ = world
    record = ExperimentRecord.read(out, "rec")
    summary = build_summary(out, [record], 0, cfg.seed)
    # SFT: every weight in every layer; the qkv graft: the last half of 2 layers
    assert layers_used(record) == "Layers used (of 2): `all` = all 2 layers; `last_half` = layer 1."
    table = experiment_table(summary.rows, record).splitlines()
    assert [line.split(" | ")[0].removeprefix("| ") for line in table[2:]] == NAMES
    n = len(record.examples)
    assert all(f" {n} (" in line for line in table[2:])  # every prompt applicable: n is the record's


def test_summarize_reads_each_record_once(world, monkeypatch):
    cfg, out, _ = world
    reads = []
    original = ExperimentRecord.read.__func__

    def counted(cls, folder, name, shard=None):
        reads.append(name)
        return original(cls, folder, name, shard)

    monkeypatch.setattr(ExperimentRecord, "read", classmethod(counted))
    run_pipeline.summarize(cfg, out, report=True)
    assert reads == ["rec"]
    assert "## Record test" in (out / "report.md").read_text()


def test_a_run_hands_its_records_to_the_summary_without_reading_them_back(world, monkeypatch, tmp_path):
    """run_all summarizes from the records the runner built from its plan (`RunResult.records`):
    none is read from state/, each equals the state file written, and the summary is the one
    that reading them back gives, byte for byte."""
    cfg, out, _ = world
    again = tmp_path / "again"
    outcome = run_pipeline.run_all(cfg, again, progress=False, report=False)
    assert [r.name for r in outcome.run.records] == [e.name for e in cfg.expanded()]
    assert outcome.run.records == [ExperimentRecord.read(again, e.name) for e in cfg.expanded()]

    class Refused:  # the summary's only way to read a record back
        @staticmethod
        def read(folder, name, shard=None):
            raise AssertionError(f"the summary read {name}'s record back from {folder}")

    rerun = tmp_path / "rerun"
    monkeypatch.setattr(run_pipeline, "ExperimentRecord", Refused)
    run_pipeline.run_all(cfg, rerun, progress=False, report=False)
    monkeypatch.undo()
    run_pipeline.summarize(cfg, again, report=False)  # from state/, as after a merge
    assert (rerun / "summary.csv").read_bytes() == (again / "summary.csv").read_bytes()


def test_a_result_file_holds_typed_rows_and_writes_again_byte_for_byte(world, tmp_path):
    """A result file's columns are `ExampleRow`'s fields, in order; its rows read back as
    ExampleRows (scored ones with every score, the rest with a reason and none) and, written
    again with the file's fingerprint, give the same file."""
    from dataclasses import fields

    import pyarrow.parquet as pq

    from weightgraft.experiments import result_files
    from weightgraft.experiments.example_rows import ExampleRow

    _, out, _ = world
    assert [f.name for f in fields(ExampleRow)] == result_files.SCHEMA.names
    record = ExperimentRecord.read(out, "rec")
    for cond in record.conditions:
        path = run_folder.condition_file(out, "rec", cond.name)
        rows = [ExampleRow(**row) for row in pq.read_table(path).to_pylist()]
        assert len(rows) == len(record.examples) and all(r.condition == cond.name for r in rows)
        for row in rows:
            scores = (row.rank, row.prob, row.target_logprob, row.exact_match, row.predicted)
            assert all(s is not None for s in scores) if row.applicable else all(s is None for s in scores)
            assert row.applicable or row.note.startswith("not applicable: ")
        again = tmp_path / path.name
        result_files.write_condition(again, rows, result_files.stored_fingerprint(path))
        assert sha256_file(again) == sha256_file(path)
