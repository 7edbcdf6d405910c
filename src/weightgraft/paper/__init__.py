"""What one paper (arXiv 2506.20746) owns, apart from the library: its presets (`presets`, which
register themselves in `weightgraft.experiments.preset_registry` when imported), its claims
(`claims`), its published numbers (`published`, `published_numbers.csv`), its parts of a run's
report (`report_sections`, `missing_part`, handed to the reporting layer as `study.PAPER`), and
the reproduce job: what it builds (`reproduce_job`), its plan and cost (`reproduce_plan`,
`estimate`) and its report (`reproduce_report`). `weightgraft.pipelines.reproduce` runs the job.

This package imports nothing at import time, so that `weightgraft.paper.estimate` stays cheap for
the CLI; the engine, donors, adapters, experiments, reporting and attribution import nothing
from it (tests/architecture/test_architecture_imports.py).
"""
