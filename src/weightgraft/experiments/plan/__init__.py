"""A run's plan: everything it will compute, resolved from the configs before any weights load.

One entry point, `build_plan(config, PlanInputs(config), shard)`, returns the typed `RunPlan`
the runner computes (building it is the run's preflight). The modules, by what they hold:

- `planner`: `build_plan` and its steps (conditions resolved on the recipient, examples encoded,
  the fixed batches and chunks, the fingerprints);
- `types`: the plan's types (`RunPlan`, `ExperimentPlan`, `PlannedModel`, `Chunk`, `Status`,
  `Shard`), plain data that `to_json`/`from_json` round-trip;
- `checks`: the checks `build_plan` makes, in one line each (model folders and configs, pairs,
  the device, the datasets);
- `selection`: which conditions and examples an experiment runs (sweeps, twins, the seeded subset);
- `plan_inputs`: `PlanInputs`, what planning reads (fingerprints, the tokenizer, prompts), never
  weights, so the plan need not know the execution cache (`execute.Resources` extends it).
"""

from weightgraft.experiments.plan.plan_inputs import PlanInputs
from weightgraft.experiments.plan.planner import build_plan
from weightgraft.experiments.plan.types import Chunk, ExperimentPlan, PlannedModel, RunPlan, Shard, Status

__all__ = ["Chunk", "ExperimentPlan", "PlanInputs", "PlannedModel", "RunPlan", "Shard", "Status", "build_plan"]
