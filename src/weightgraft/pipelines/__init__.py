"""In what order the work happens: data and models, then experiments, then summary, verdict and
report. The command line is a thin layer over these functions."""

from weightgraft.pipelines.run import RunOutcome, merge_run, run_all, run_ranks

__all__ = ["RunOutcome", "merge_run", "run_all", "run_ranks"]
