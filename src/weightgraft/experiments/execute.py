"""Execution: models loaded once per run, and a chunk's rows scored in batches.

Rows of one forward pass are (example, condition) pairs of conditions that share recipient,
donors and method. Batches are fixed: the plan's chunks of conditions are fixed, and the
examples are cut into batches once per experiment (`plan.build.example_batches`, from all its
examples), which shards take whole. Every forward therefore holds the same rows in every run,
and the engine's prefix sharing (which splits rows by what the whole batch has in common)
computes each row the same way: a resumed or sharded run equals an uninterrupted one bit for
bit, and sweeps get sharing's speed-up. `compute_chunk` builds the rows and scores them; the
chunk's method (`methods`: weight grafting, activation patching) computes their logits.
"""

from __future__ import annotations

import torch

from weightgraft.donors.shaped import ShapedDonor
from weightgraft.engine.grafter import Grafter
from weightgraft.errors import UserError
from weightgraft.experiments.conditions import Condition, NotApplicable, ShapeSpec
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.example_rows import Example, ExampleRow
from weightgraft.experiments.methods import ChunkMethod, Row
from weightgraft.experiments.metrics import score_rows
from weightgraft.experiments.models import load_model
from weightgraft.experiments.plan import PlanInputs


class Resources(PlanInputs):
    """The models, tokenizer, grafters and prompts of one run, each loaded once: the plan's
    inputs (`PlanInputs`) and the weights, which only execution loads."""

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self._models: dict[str, torch.nn.Module] = {}
        self._grafters: dict[tuple, object] = {}
        self._shaped: dict[tuple[str, str], ShapedDonor] = {}  # (recipient, model): the donor unshaped
        self.share_prefixes = True  # False: every row in full (benchmarks compare the two)

    def model(self, key: str):
        if key not in self._models:
            self._models[key] = load_model(
                self.config.models[key],
                self.config.device,
                self.config.dtype,
                self.config.trust_remote_code,
                field=f"models.{key}",
            )
        return self._models[key]

    def donor(self, recipient: str, name: str):
        """A donor by its Grafter name: a model key, or a shaped donor's name `KEY~SHAPE`
        (`ResolvedGraft.donor_key`), built once per recipient as a `ShapedDonor` of the loaded
        model; the shapes of one model share their singular vectors (`ShapedDonor.variant`)."""
        if "~" not in name:
            return self.model(name)
        key, _, shape = name.partition("~")
        if (recipient, key) not in self._shaped:
            self._shaped[(recipient, key)] = ShapedDonor(self.model(key))
        spec = ShapeSpec.from_key(shape)
        return self._shaped[(recipient, key)].variant(scale=spec.scale, rank=spec.rank, top=spec.top)

    def grafter(self, recipient: str, donors: tuple[str, ...]):
        """A Grafter of `recipient` with the named donors (one donor: the single-donor form)."""
        key = (recipient, donors)
        if key not in self._grafters:
            allow = self.config.allow_config_differences
            try:
                if len(donors) == 1:
                    donor = self.donor(recipient, donors[0])
                    grafter = Grafter(self.model(recipient), donor, allow_config_differences=allow)
                else:
                    models = {k: self.donor(recipient, k) for k in donors}
                    grafter = Grafter(self.model(recipient), donors=models, allow_config_differences=allow)
            except ValueError as err:  # the engine's word on models that do not fit together
                raise UserError(f"models.{recipient} and models.{'/'.join(donors)} cannot be grafted: {err}") from err
            # Prefix sharing stays on: batches are fixed (see the module's docstring), so how
            # it splits a row does not depend on what is pending or on the shard.
            grafter.share_prefixes = self.share_prefixes
            self._grafters[key] = grafter
        return self._grafters[key]


def compute_chunk(
    method: ChunkMethod, experiment: str, chunk: list[Condition], batches: list[list[Example]], decode, bar
) -> dict[str, list[ExampleRow]]:
    """Per-example rows for every condition of the chunk (same recipient, donors and method),
    in the order of the batches' examples.

    method: computes the rows' logits (`methods.method_for`); decode: token ids -> text (the
    tokenizer's `decode`, for the predicted token); bar: progress, told each batch's rows."""
    records: dict[str, list[ExampleRow]] = {c.name: [] for c in chunk}
    for batch in batches:
        rows = []
        for ei, ex in enumerate(batch):
            total_len = len(ex.input_ids) + len(ex.target_ids) - 1
            for cond in chunk:
                try:
                    masks = cond.row_masks(ex.positions, len(ex.input_ids), total_len, ex.prompt.id)
                except NotApplicable as err:
                    records[cond.name].append(ExampleRow.not_applicable(experiment, cond.name, ex, str(err)))
                    continue
                rows.append(Row(ei, cond, masks))
        if rows:
            logits, first_steps = method.logits(batch, rows)
            scores = score_rows(
                logits,
                first_steps,
                [batch[row.example].target_ids for row in rows],
                [batch[row.example].scored for row in rows],
                [batch[row.example].unit for row in rows],
            )
            for row, score in zip(rows, scores):
                predicted = decode([score.predicted_id])
                records[row.condition.name].append(
                    ExampleRow.scored(experiment, row.condition.name, batch[row.example], score, predicted)
                )
        bar.update(len(batch) * len(chunk))
    return records
