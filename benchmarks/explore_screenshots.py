"""The README's pictures of `weightgraft explore`, taken in Debian's Chromium on the built-in models
(built or reused, as `weightgraft explore` opens them), so they can be made again after the page
changes rather than drawn by hand:

- docs/explore.png: FE+LT grafted from the relation model, one layer split into its heads, only
  two heads of its O kept at the last token, and the attribution map;
- docs/explore_compare.png: pinned grafts compared (probability, rank, recovery), with a
  competing answer;
- docs/explore_exact.png: the exact effect map over the grid (the split layer's heads too),
  beside the first-order map's error;
- docs/explore_lens.png: the logit lens of the recipient, each donor and the current graft.

Each is cropped to its panel, 1280 px wide at most, and stored with a 256-colour palette (the
page has few colours), to stay small in the repository.

Usage: python benchmarks/explore_screenshots.py [--size default|tiny] [--home DIR] [--out docs]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from PIL import Image

from weightgraft.explore.open_session import builtin_models, open_session
from weightgraft.explore.server import ServerThread

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
WIDTH = 1280


def save_small(png: bytes, out: Path) -> int:
    """The screenshot with a 256-colour palette (a third of the size; the page's colours survive)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    return out.stat().st_size


def _answered(page, count: int) -> None:
    page.wait_for_function(f"window.explore.answered >= {count}", timeout=120_000)


def _shot(page, out: Path, *parts: tuple[str, str], width: int = WIDTH) -> int:
    """Each part, the page from the top of one CSS selector to the bottom of another, `width` px
    wide, one under the other."""
    box = "(s) => { const r = document.querySelector(s).getBoundingClientRect(); return [r.top + scrollY, r.bottom + scrollY]; }"
    images = []
    for top, bottom in parts:
        y = max(0, page.evaluate(box, top)[0] - 6)
        clip = {"x": 0, "y": y, "width": width, "height": page.evaluate(box, bottom)[1] + 6 - y}
        images.append(Image.open(io.BytesIO(page.screenshot(clip=clip, full_page=True))).convert("RGB"))
    joined = Image.new("RGB", (width, sum(i.height for i in images)), "white")
    for i, image in enumerate(images):
        joined.paste(image, (0, sum(j.height for j in images[:i])))
    buffer = io.BytesIO()
    joined.save(buffer, format="PNG")
    return save_small(buffer.getvalue(), out)


def take(url: str, out: Path, split_layer: int, browser=None) -> dict[str, int]:
    """The four pictures of the page served at `url`, into `out`; their sizes in bytes. `browser`:
    a Playwright Chromium already open (else one is started here)."""
    if browser is None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                return take(url, out, split_layer, chromium)
            finally:
                chromium.close()
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    try:
        return _play(context.new_page(), url, out, split_layer)
    finally:
        context.close()


def _play(page, url: str, out: Path, split_layer: int) -> dict[str, int]:
    """The clicks a person makes, with a picture at each step worth showing."""
    sizes = {}
    page.goto(url)
    _answered(page, 1)
    for i, condition in enumerate(("LT", "FE+LT")):  # each pinned
        page.click(f"button[data-sel='{condition}']")
        _answered(page, 2 + 2 * i)
        page.click("#pin")
        _answered(page, 3 + 2 * i)
    page.locator(f"button.hx[data-layer='{split_layer}']").first.click()
    last = page.locator("th.tok").count() - 1
    for i, head in enumerate((0, 2)):  # FE+LT, but only two heads of O at the split layer at LT
        page.click(f"td.cell[data-group='O'][data-layer='{split_layer}'][data-head='{head}'][data-pos='{last}']")
        _answered(page, 6 + i)
    rival = page.evaluate("view.predictions[0].top.find((t) => t.id !== view.target_id).token")
    page.fill("#rival", rival)
    page.press("#rival", "Enter")
    _answered(page, 8)
    sizes["explore_compare.png"] = _shot(page, out / "explore_compare.png", ("#compare-box", "#compare-box"))
    page.click("#attribute")
    page.wait_for_selector("#map-legend:not([hidden])", timeout=120_000)
    sizes["explore.png"] = _shot(page, out / "explore.png", ("header", "#predictions"))
    page.click("#lens-button")
    page.wait_for_selector("#lens-plot", timeout=120_000)
    sizes["explore_lens.png"] = _shot(page, out / "explore_lens.png", ("#lens-button", "#lens"), width=720)
    page.click("#clear")  # the map of single cells alone, without the current graft's leave-one-out list
    _answered(page, 9)
    page.click("#exact")
    page.wait_for_function("document.querySelector('#exact-info').textContent.length > 0", timeout=600_000)
    exact = _shot(page, out / "explore_exact.png", ("#grid", "#map-legend"), ("#exact", "#exact-info"))
    sizes["explore_exact.png"] = exact
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="default", choices=["default", "tiny"])
    parser.add_argument("--home", default=None, help="the built-in models' cache (default: weightgraft's)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument(
        "--split-layer", type=int, default=None, help="the layer split into heads (default: the middle)"
    )
    args = parser.parse_args()
    recipient, donors, data = builtin_models(args.size, args.home, progress=True)
    session = open_session(recipient, donors, data, threads=2)
    server = ServerThread(session)
    url = server.start()
    try:
        layer = args.split_layer if args.split_layer is not None else session.grid.num_layers // 2
        args.out.mkdir(parents=True, exist_ok=True)
        for name, size in take(url, args.out, layer).items():
            print(f"{args.out / name}: {size / 1024:.0f} KiB")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
