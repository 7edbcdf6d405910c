"""The paper's experiments: conditions by entity role, the preset registry, a batched resumable runner.

    from weightgraft.experiments import load_config
    from weightgraft.pipelines import run_all
    config = load_config("run.yaml", device="cuda", dtype="bfloat16")
    run_all(config, "runs/my-run")      # examples/*.parquet, summary.csv, report.md/html

See `conditions` for the condition language (roles, component sets, layer bands, the grammar and
`resolve_condition`), `vocabulary` for the other names (metrics, fidelities), `config` for the
YAML format, `preset_registry` for presets (the paper's analyses are registered by
`weightgraft.paper.presets`, which `weightgraft.pipelines` imports), `run_folder` for the run
folder's layout (`result_files`, `example_rows` and `run_json` for what it holds) and `runner` for resuming.
"""

from weightgraft.experiments.config import ConfigError, RunConfig, load_config, parse_config
from weightgraft.experiments.runner import Runner, RunResult, run_experiments

__all__ = ["ConfigError", "RunConfig", "RunResult", "Runner", "load_config", "parse_config", "run_experiments"]
