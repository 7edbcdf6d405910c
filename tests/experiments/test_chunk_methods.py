"""Both ways of computing a chunk (experiments/methods: weight grafting, activation patching)
through the one call site the runner uses (`execute.compute_chunk` with `methods.method_for`),
against the independent per-token reference grafter (tests/support/reference_grafter.py).

Weight grafting is compared row by row with the reference's grafts at the same tokens. Activation
patching at every position is weight grafting in disguise: replacing each block's output in
layers 0..k with the donor's, at every token, leaves the donor's hidden state after block k,
which is what grafting the donor's token embedding and every weight of layers 0..k computes.
"""

from __future__ import annotations

import pytest
import torch

from exp_fixtures import build_models
from reference_grafter import GraftSpec, reference_logits
from tiny_world import base_config, write_dataset
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.execute import Resources, compute_chunk
from weightgraft.experiments.methods import ActivationPatching, WeightGrafting, method_for
from weightgraft.experiments.plan import build_plan

# float32 round-off between a padded, prefix-shared batch and one unpadded row at a time
TOL = dict(rtol=1e-4, atol=2e-5)
FIRST_LAYERS = {"layers": "first_half", "components": "BLOCKS"}
CONDITIONS = [
    {
        "name": "qkv FE+LT late",
        "grafts": [{"positions": "FE+LT", "layers": "last_half", "components": ["q", "k", "v"]}],
    },
    {"name": "mlp LT first", "grafts": [{"positions": "LT", "layers": [0], "components": ["gate", "up", "down"]}]},
    {"name": "patch all early", "method": "activations", "grafts": [{"positions": "ALL", **FIRST_LAYERS}]},
    {"name": "patch all", "method": "activations", "grafts": [{"positions": "ALL", "components": "BLOCKS"}]},
]


def reference_specs(name: str, ex, n_layers: int) -> list[GraftSpec]:
    """The reference's grafts of a condition on one row (prompt, then the target's teacher-
    forced tokens, which take the last prompt token's grafts)."""
    n_in, n = len(ex.input_ids), len(ex.input_ids) + len(ex.target_ids) - 1
    last = list(range(n_in - 1, n))
    half = list(range(n_layers // 2))
    if name == "qkv FE+LT late":
        return [GraftSpec(ex.positions["first_entity"] + last, list(range(n_layers // 2, n_layers)), ["q", "k", "v"])]
    if name == "mlp LT first":
        return [GraftSpec(last, [0], ["gate", "up", "down"])]
    layers = half if name == "patch all early" else list(range(n_layers))
    return [GraftSpec("all", layers, "all"), GraftSpec("all", "all", ["embed"])]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("methods")
    return build_models(root / "models", layers=4), write_dataset(root / "data")


def test_both_methods_through_one_call_site_equal_the_reference(world):
    paths, data = world
    experiment = {"name": "m", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": CONDITIONS}
    experiment["max_examples"] = 4
    cfg = parse_config(dict(base_config(paths, data, [experiment]), max_batch_tokens=200))
    resources = Resources(cfg)
    (exp,) = build_plan(cfg, resources).experiments
    tokenizer = resources.tokenizer(["pre", "sft"])
    recipient, donor = resources.model("pre"), resources.model("sft")
    kinds, checked = set(), 0
    for names in exp.chunks:
        chunk = [exp.condition(name) for name in names]
        method = method_for(resources, chunk[0], exp.recipient.tied, tokenizer.pad_token_id)
        kinds.add(type(method))
        calls = []
        original = method.logits

        def spy(batch, rows, _original=original, _calls=calls):
            logits, first = _original(batch, rows)
            _calls.append((batch, rows, logits.detach().float(), first))
            return logits, first

        method.logits = spy
        records = compute_chunk(method, exp.name, chunk, exp.my_batches(), tokenizer.decode, _NoBar())
        assert {len(r) for r in records.values()} == {len(exp.examples)}
        for batch, rows, logits, first in calls:
            for r, row in enumerate(rows):
                ex = batch[row.example]
                ids = torch.tensor(ex.input_ids + ex.target_ids[:-1])
                specs = reference_specs(row.condition.name, ex, exp.recipient.num_layers)
                want = reference_logits(recipient, donor, ids, specs)[len(ex.input_ids) - 1 :]
                torch.testing.assert_close(logits[r, first[r] : first[r] + len(ex.target_ids)], want, **TOL)
                checked += 1
    assert kinds == {WeightGrafting, ActivationPatching}
    assert checked == len(CONDITIONS) * len(exp.examples)


class _NoBar:
    def update(self, _n: int) -> None:
        pass
