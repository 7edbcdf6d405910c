"""What the explorer's server costs around the models: a kept-alive connection's request latency,
and the many-prompt scoring's seconds per prompt on a first and on a repeated request.

- kept-alive: one `http.client` connection (as a script or notebook keeps it) sends the same
  request again and again: a refused body (422: no model work, the wire alone) and a click the
  session answers from its caches; the median of each, in ms;
- many prompts: the same prompts scored with one graft, then with another (the recipient's and
  donors' rows are the same for both: a request that reuses them runs only the graft's row), then
  with the first again; seconds per prompt of each request. The ratios are measured in one run.

Usage: python benchmarks/bench_explore_serving.py [--size default|tiny] [--home DIR] [--count 100]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import time
from pathlib import Path
from urllib.parse import urlparse

from weightgraft.explore.analyses import many_prompts
from weightgraft.explore.grid import Cells
from weightgraft.explore.open_session import builtin_models, open_session
from weightgraft.explore.server import ServerThread

ROOT = Path(__file__).resolve().parents[1]


def kept_alive_ms(url: str, body: dict, repeats: int) -> float:
    """The median ms of `repeats` POSTs of `body` to /api/predict on one kept-alive connection."""
    where = urlparse(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
    times = []
    for _ in range(repeats + 3):  # the first three warm up
        start = time.perf_counter()
        connection.request("POST", "/api/predict", body=data, headers=headers)
        connection.getresponse().read()
        times.append(1000 * (time.perf_counter() - start))
    connection.close()
    return statistics.median(times[3:])


def many_seconds(session, count: int) -> dict:
    """Seconds per prompt of three many-prompt requests: graft A, graft B, graft A again."""
    prompt = next(iter(session.prompts.values()))
    encoded = session.encode(prompt.text, prompt.target, prompt.id)
    last = len(encoded.input_ids) - 1
    donor, layers = session.grid.donors[0], session.grid.num_layers
    grafts = {
        "first (graft A)": [Cells(donor, "FFN", layer, (last,)) for layer in range(layers // 2, layers)],
        "another graft (B)": [Cells(donor, "O", layer, (last,)) for layer in range(layers)],
        "graft A again": [Cells(donor, "FFN", layer, (last,)) for layer in range(layers // 2, layers)],
    }
    out = {}
    for name, cells in grafts.items():
        start = time.perf_counter()
        scored = many_prompts(session, encoded, cells, count=count)
        out[name] = (time.perf_counter() - start) / scored["prompts"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="default", choices=["default", "tiny"])
    parser.add_argument("--home", default=None, help="Where the built-in models are cached (built if missing).")
    parser.add_argument("--count", type=int, default=100, help="Prompts of each many-prompt request.")
    parser.add_argument("--repeats", type=int, default=50, help="Kept-alive requests of each kind.")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "explore_serving.json")
    args = parser.parse_args()

    recipient, donors, data = builtin_models(args.size, args.home, progress=True)
    session = open_session(recipient, donors, data, threads=1)
    prompt = next(iter(session.prompts.values()))
    server = ServerThread(session)
    url = server.start()
    try:
        refused = kept_alive_ms(url, {"prompt": {}}, args.repeats)
        click = {"prompt": {"text": prompt.text, "target": prompt.target, "prompt_id": prompt.id}, "cells": []}
        cached = kept_alive_ms(url, click, args.repeats)
    finally:
        server.stop()
    many = many_seconds(session, args.count)
    result = {
        "model": f"built-in {args.size}: {session.grid.num_layers} layers, donors {session.grid.donors}",
        "cpu_count": os.cpu_count(),
        "kept_alive_median_ms": {"refused body (422)": round(refused, 2), "cached click": round(cached, 2)},
        "many_prompts_seconds_per_prompt": {k: round(v, 5) for k, v in many.items()},
        "many_repeated_over_first": round(many["another graft (B)"] / many["first (graft A)"], 3),
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
