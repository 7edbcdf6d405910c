"""`weightgraft data` at the paper's sizes: seconds per 1000 facts, measured in one run here.

Each case runs the real command in a fresh process (`python -m weightgraft data ...`, imports
included) into a temporary folder:

- FMRA: `--kinds fake_real`, N facts, all in the relation set (written three times: both
  orders, a2b, b2a), no task set;
- FMFA: `--kinds fake_fake`, the same;
- RMRA-shuffled: `--kinds real_shuffled`, as many facts as our real films allow (at most N);
- user facts: `--user-facts` with U facts of distinct invented names (three sets as above).

The first line is the command's start-up (`weightgraft --help`), a constant within every time.

Usage: nice python benchmarks/bench_data.py [--facts 1000] [--user-facts 20000] [--only fmra,...]
The `weightgraft` that runs is the one on PYTHONPATH (so an older checkout can be timed the same way).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KINDS = {"fmra": "fake_real", "fmfa": "fake_fake", "rmra_shuffled": "real_shuffled"}


def user_facts_file(path: Path, n: int) -> Path:
    """`n` facts whose actors, films and characters all have distinct made-up names."""
    from weightgraft.data.names import _faker_name_lists

    first, last = _faker_name_lists()
    people = (f"{f} {la}" for la in last for f in first)  # 690 x 1000 distinct pairs
    with path.open("w", encoding="utf-8") as handle:
        for index in range(n):
            record = {
                "first_actor": next(people),
                "second_actor": next(people),
                "movie_title": f"The {last[index % len(last)]} Affair Part {index}",
                "main_character": next(people),
                "release_year": 1950 + index % 70,
                "genre": "drama",
                "city": "Oslo",
                "director": next(people),
                "studio": "Bench Pictures",
            }
            handle.write(json.dumps(record) + "\n")
    return path


def real_shuffled_limit() -> int:
    from weightgraft.data.real_entities import REAL_FILMS

    return len(REAL_FILMS)


def time_data(args: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "weightgraft", "data", "--out", str(Path(tmp) / "out"), *args]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1000)
    parser.add_argument("--user-facts", type=int, default=20_000)
    parser.add_argument("--only", default="fmra,fmfa,rmra_shuffled,user")
    options = parser.parse_args()
    cases = options.only.split(",")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "weightgraft", "--help"], capture_output=True, check=True)
    startup = time.perf_counter() - start
    print(f"start-up of the command (imports), included below: {startup:.1f} s")
    print(f"{'case':<16}{'facts':>8}{'seconds':>10}{'s / 1000 facts':>16}")
    for case in cases:
        if case == "user":
            n = options.user_facts
            with tempfile.TemporaryDirectory() as tmp:
                facts = user_facts_file(Path(tmp) / "facts.jsonl", n)
                seconds = time_data(["--user-facts", str(facts)])
        else:
            n = options.facts if case != "rmra_shuffled" else min(options.facts, real_shuffled_limit())
            kind = KINDS[case]
            seconds = time_data(["--kinds", kind, "--facts-per-kind", str(n), "--relation", str(n), "--task", "0"])
        print(f"{case:<16}{n:>8}{seconds:>10.1f}{seconds / n * 1000:>16.1f}", flush=True)


if __name__ == "__main__":
    main()
