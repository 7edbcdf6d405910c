"""Click-to-answer time of `weightgraft explore` on the built-in model, over a scripted session.

The explorer is served from a thread on 127.0.0.1, its model calls on `--threads` torch threads
(1, then 2, by default: the issue asks for 2 CPU cores, and on a small model one thread answers
fastest). The script plays the clicks a person makes on each of a few dataset prompts:
FE+LT, single cells on and off, whole rows and columns, a band of components, clear. Each click
is timed two ways:
- http: the request the page sends (the whole state as JSON) until its answer is parsed;
- browser (when /usr/bin/chromium is there): a real click in the page until the new predictions
  are drawn (`window.explore.latency`) and until the next frame is painted with them
  (`window.explore.painted`), as the page measures it itself, with the parts of that time
  (`window.explore.timings`: the server's from its Server-Timing header, the page's own).
Opening a prompt (the recipient's and every donor's own predictions, cached per prompt after) is
timed apart: it is not a click. Prints the median, 90th percentile and maximum per kind and
writes benchmarks/results/explore.json.

Usage: python benchmarks/bench_explore.py [--size default|tiny] [--home DIR] [--threads 1 2]
       python benchmarks/bench_explore.py --recipient DIR --donors NAME=DIR ... --data DATASET
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
import urllib.request
from pathlib import Path

from weightgraft.explore.analyses import exact_map
from weightgraft.explore.grid import Cells
from weightgraft.explore.open_session import builtin_models, open_session, parse_donors
from weightgraft.explore.server import ServerThread

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
TARGET_MS = 200.0


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def scripted_states(session, prompt, rng: random.Random, clicks: int) -> list[list[dict]]:
    """The selections after each click of one person's session on `prompt` (cells as the page sends them)."""
    encoded = session.encode(prompt.text, prompt.target, prompt.id)
    n, columns, donors = len(encoded.input_ids), session.grid.columns, session.grid.donors
    weights = set(session.grid.component_sets()["WEIGHTS"])
    cells: dict[tuple[str, int | None, int], str] = {}
    states = []

    def snapshot() -> list[dict]:
        merged: dict[tuple, list[int]] = {}
        for (group, layer, pos), donor in cells.items():
            merged.setdefault((donor, group, layer), []).append(pos)
        return [{"donor": d, "group": g, "layer": layer, "positions": sorted(p)} for (d, g, layer), p in merged.items()]

    fe_lt = encoded.selections.get("FE+LT", [n - 1])
    for c in columns:  # the paper's FE+LT: every weight there, all layers
        if c.group in weights:
            cells.update({(c.group, c.layer, p): donors[0] for p in fe_lt})
    states.append(snapshot())
    for i in range(clicks - 1):
        kind = i % 10
        if kind < 6:  # one cell on or off
            c, p = rng.choice(columns), rng.randrange(n)
            key = (c.group, c.layer, p)
            cells.pop(key) if key in cells else cells.__setitem__(key, rng.choice(donors))
        elif kind == 6:  # a whole row
            p = rng.randrange(n)
            for c in columns:
                cells[(c.group, c.layer, p)] = donors[0]
        elif kind == 7:  # a whole column
            c = rng.choice(columns)
            for p in range(n):
                cells[(c.group, c.layer, p)] = donors[0]
        elif kind == 8:  # O+FFN at LT in the last quarter, from another donor
            for c in columns:
                if c.group in ("O", "FFN") and c.layer is not None and c.layer >= session.grid.num_layers * 3 // 4:
                    cells[(c.group, c.layer, n - 1)] = donors[-1]
        else:
            cells.clear()
        states.append(snapshot())
    return states


def summary(ms: list[float]) -> dict:
    ordered = sorted(ms)
    return {
        "clicks": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p90_ms": round(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)], 1),
        "max_ms": round(max(ms), 1),
    }


def http_session(url: str, session, prompts, clicks: int, seed: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    opening, per_click = [], []
    for prompt in prompts:
        body = {"prompt": {"text": prompt.text, "target": prompt.target, "prompt_id": prompt.id}, "top_k": 5}
        start = time.perf_counter()
        post(url, "/api/predict", {**body, "cells": []})
        opening.append(1000 * (time.perf_counter() - start))
        for cells in scripted_states(session, prompt, rng, clicks):
            start = time.perf_counter()
            post(url, "/api/predict", {**body, "cells": cells})
            per_click.append(1000 * (time.perf_counter() - start))
    return opening, per_click


# The parts of a browser click, as the page times them (window.explore.timings): the request
# until its answer's headers (fetch), of which the server's reading, model work and JSON
# (its Server-Timing header); the answer's JSON parse; the page's DOM work (render); and the
# browser's style, layout and paint up to the next frame (paint).
PARTS = ("fetch", "read", "work", "json", "parse", "render", "paint")
NEXT_FRAME = """() => { window.nextFrame = new Promise((resolve, reject) => {
    document.addEventListener("explore-framed", resolve, { once: true });
    setTimeout(() => reject(new Error("no answer drawn in 60 s")), 60000);
}); }"""


def browser_session(url: str, clicks: int, seed: int) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """Real clicks on cells, rows and columns of the page's first prompt; the page's own timing:
    until the answer is drawn (rendered), until the next frame is painted, and each part."""
    from playwright.sync_api import sync_playwright

    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    rng = random.Random(seed)
    rendered, painted, parts = [], [], {k: [] for k in PARTS}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)
        page.wait_for_function("window.explore.framed >= 1", timeout=60_000)
        page.click("button[data-sel='FE+LT']")
        page.wait_for_function("window.explore.framed >= 2", timeout=60_000)
        cells, rows, cols = page.locator("td.cell"), page.locator("th.tok"), page.locator("th.col")
        for i in range(clicks):
            # Waited for by the page's event, not by polling (Playwright's polls every frame): on 2
            # cores a poll takes CPU from the server's torch threads, which then wait on each other.
            page.evaluate(NEXT_FRAME)
            if i % 10 == 8:
                rows.nth(rng.randrange(rows.count())).click()
            elif i % 10 == 9:
                cols.nth(rng.randrange(cols.count())).click()
            else:
                cells.nth(rng.randrange(cells.count())).click()
            page.evaluate("window.nextFrame")
            timed = page.evaluate(
                "({rendered: window.explore.latency, painted: window.explore.painted, ...window.explore.timings})"
            )
            rendered.append(timed["rendered"])
            painted.append(timed["painted"])
            for k in PARTS:
                parts[k].append(timed.get(k, 0.0))
        browser.close()
    return rendered, painted, parts


def exact_map_time(session, prompt) -> dict:
    """The exact effect map on one prompt for the first donor, with FE+LT as the current graft:
    every cell grafted alone and every cell of FE+LT left out, as the page's button runs it."""
    encoded = session.encode(prompt.text, prompt.target, prompt.id)
    fe_lt = scripted_states(session, prompt, random.Random(0), 1)[0]
    cells = [Cells(c["donor"], c["group"], c["layer"], tuple(c["positions"])) for c in fe_lt]
    start = time.perf_counter()
    out = exact_map(session, encoded, session.grid.donors[0], cells)
    left_out = out["leave_one_out"]["rows"] if out["leave_one_out"] else 0
    return {"seconds": round(time.perf_counter() - start, 2), "rows": out["rows"], "left_out": left_out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="default", choices=["default", "tiny"])
    parser.add_argument("--home", default=None, help="Where the built-in models are cached (built if missing).")
    parser.add_argument("--recipient", default=None, help="Measure on these models instead of the built-in ones.")
    parser.add_argument("--donors", nargs="*", default=[], help="NAME=PATH, with --recipient.")
    parser.add_argument("--data", default=None, help="A dataset folder (prompts with roles), with --recipient.")
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1, 2], help="Torch threads to measure with, each in turn."
    )
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--clicks", type=int, default=30, help="Clicks per prompt.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "explore.json")
    args = parser.parse_args()

    if args.recipient:
        recipient, donors, data, label = args.recipient, parse_donors(args.donors), Path(args.data), args.recipient
    else:
        recipient, donors, data = builtin_models(args.size, args.home, progress=True)
        label = f"built-in {args.size}"
    session = open_session(recipient, donors, data)
    prompts = random.Random(args.seed).sample(list(session.prompts.values()), min(args.prompts, len(session.prompts)))
    result = {
        "model": f"{label}: {session.grid.num_layers} layers, donors {session.grid.donors}",
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "target_ms": TARGET_MS,
        "by_threads": {},
    }
    print(f"{result['model']}; {os.cpu_count()} CPUs; target: a click answers in <= {TARGET_MS:.0f} ms")
    for threads in args.threads:
        session.lock.threads = threads
        session._baselines.clear()  # each setting opens its prompts afresh
        server = ServerThread(session)
        url = server.start()
        try:
            post(url, "/api/predict", {"prompt": {"text": "warm up"}, "cells": []})
            opening, clicks = http_session(url, session, prompts, args.clicks, args.seed)
            measured = {"http_click": summary(clicks), "http_open_prompt": summary(opening)}
            if os.path.exists(CHROMIUM):
                rendered, painted, parts = browser_session(url, args.clicks * 2, args.seed)
                measured["browser_click"] = summary(rendered)
                measured["browser_painted"] = summary(painted)
                measured["browser_parts_median_ms"] = {k: round(statistics.median(v), 1) for k, v in parts.items()}
        finally:
            server.stop()
        result["by_threads"][str(threads)] = measured
        print(f"torch threads {threads}:")
        for kind in ("http_click", "browser_click", "browser_painted", "http_open_prompt"):
            if kind in measured:
                r = measured[kind]
                print(
                    f"  {kind:17s} median {r['median_ms']:7.1f} ms  p90 {r['p90_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms  ({r['clicks']} requests)"
                )
        if "browser_parts_median_ms" in measured:
            print("  browser click's parts (medians, ms):", measured["browser_parts_median_ms"])
        kind = "browser_painted" if "browser_painted" in measured else "http_click"
        verdict = "meets" if measured[kind]["median_ms"] <= TARGET_MS else "misses"
        print(f"  the median click ({kind}) {verdict} the target")
    result["exact_map"] = exact_map_time(session, prompts[0])
    e = result["exact_map"]
    print(
        f"exact map of the whole grid (FE+LT grafted, so its cells are also left out one by one): "
        f"{e['seconds']:.1f} s for {e['rows']} single cells and {e['left_out']} leave-one-out rows, on {session.lock.threads} thread(s)"
    )
    result["load_average_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"load average {result['load_average']:.1f} before, {result['load_average_after']:.1f} after; written to {args.out}"
    )


if __name__ == "__main__":
    main()
