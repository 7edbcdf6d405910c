"""In what order the work happens: data and models, then experiments, then summary, verdict and
report. The command line is a thin layer over these functions."""

from weightgraft.pipelines.run import RunOutcome, run_all

__all__ = ["RunOutcome", "run_all"]
