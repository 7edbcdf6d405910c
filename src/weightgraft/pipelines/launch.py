"""`weightgraft run`'s work: one config run in one of three ways, chosen by how it was launched.

- `shard=(I, N)` (from `--shard I/N`, e.g. a SLURM array task): only that shard's examples;
  `weightgraft merge` joins the shards later;
- under torchrun / `accelerate launch` with more than one process: each rank runs its shard and
  rank 0 merges and reports (`run_ranks`);
- otherwise: the whole run, then its summary, verdict and report (`run_all`).
"""

from __future__ import annotations

from pathlib import Path

from weightgraft.errors import UserError
from weightgraft.experiments.config import RunConfig
from weightgraft.pipelines.run import RunOutcome, refuse_split_overwrite, run_all, run_ranks
from weightgraft.runtime import launch_shard


def launch_run(
    config: RunConfig,
    out: str | Path,
    *,
    shard: tuple[int, int] | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> RunOutcome:
    """Run `config` into `out` (resuming): the given `shard`, this process's share of a
    multi-process launch, or the whole run. UserError when both a shard and a multi-process
    launch split the examples."""
    if shard is not None:
        if launch_shard() is not None:
            raise UserError(
                "--shard and a multi-process launch (WORLD_SIZE > 1) both split the examples; use one of them"
            )
        refuse_split_overwrite(overwrite)
        return run_all(config, out, progress=progress, shard=shard)
    return run_ranks(config, out, progress=progress, overwrite=overwrite)


def reports_here() -> bool:
    """Whether this process tells the user about the run: alone, or rank 0 of a launch."""
    launch = launch_shard()
    return launch is None or launch[0] == 0
