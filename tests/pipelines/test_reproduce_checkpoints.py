"""Issue 33, item 4: a finetune's checkpoints are resumed from by the ledger's rule
(`ledger.stamp_matches`): those of the same inputs are kept, those of changed inputs removed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from weightgraft.ledger import stamp_matches
from weightgraft.paper.reproduce_job import FinetuneJob
from weightgraft.pipelines.reproduce import CHECKPOINT_STAMP, Pipeline


def claimer(is_main: bool = True) -> SimpleNamespace:
    """The part of a `Pipeline` that `claim_checkpoints` reads: its rank and its progress lines."""
    said: list[str] = []
    return SimpleNamespace(is_main=is_main, say=said.append, said=said)


def finetune(tmp_path: Path) -> FinetuneJob:
    return FinetuneJob(
        "relation", "relation", tmp_path / "models" / "relation", tmp_path / "checkpoints" / "relation", ""
    )


def test_checkpoints_of_the_same_inputs_are_kept_and_of_changed_inputs_removed(tmp_path):
    ft, pipeline = finetune(tmp_path), claimer()
    inputs = {"base_model": "a" * 64, "config": {"epochs": 2}}
    Pipeline.claim_checkpoints(pipeline, ft, inputs)
    assert stamp_matches(ft.checkpoints / CHECKPOINT_STAMP, inputs)
    (ft.checkpoints / "checkpoint-1").mkdir()  # an epoch finished, then the job was killed
    Pipeline.claim_checkpoints(pipeline, ft, inputs)  # resumed with the same inputs
    assert (ft.checkpoints / "checkpoint-1").is_dir() and pipeline.said == []
    changed = {**inputs, "config": {"epochs": 3}}
    Pipeline.claim_checkpoints(pipeline, ft, changed)
    assert not (ft.checkpoints / "checkpoint-1").exists()
    assert pipeline.said == [f"  {ft.checkpoints}: checkpoints of other inputs, removed"]
    assert stamp_matches(ft.checkpoints / CHECKPOINT_STAMP, changed)
    assert not stamp_matches(ft.checkpoints / CHECKPOINT_STAMP, inputs)


def test_another_rank_goes_on_once_the_stamp_is_of_its_inputs(tmp_path):
    ft, inputs = finetune(tmp_path), {"base_model": "b" * 64}
    Pipeline.claim_checkpoints(claimer(), ft, inputs)
    Pipeline.claim_checkpoints(claimer(is_main=False), ft, inputs)  # returns at once: stamped
