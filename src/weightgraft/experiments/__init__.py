"""The paper's experiments: conditions by entity role, presets, a batched resumable runner.

    from weightgraft.experiments import load_config, run_experiments
    config = load_config("run.yaml", device="cuda", dtype="bfloat16")
    run_experiments(config, "runs/my-run")      # examples/*.parquet, summary.csv, report.md/html

See `config` for the YAML format, `conditions` for the condition vocabulary, `presets` for the
paper's five analyses, `runner` for the run folder's layout and resuming.
"""

from weightgraft.experiments.config import ConfigError, RunConfig, load_config, parse_config
from weightgraft.experiments.runner import RunResult, Runner, run_experiments

__all__ = ["ConfigError", "RunConfig", "RunResult", "Runner", "load_config", "parse_config",
           "run_experiments"]
