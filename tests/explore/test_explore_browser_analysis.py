"""The explorer's slower analyses in a real browser (Debian's Chromium, driven by Playwright): the
exact effect map equals single-cell grafts computed here with the library's Grafter, the logit
lens draws a line per model with the ranks the library gives, and the graft over many prompts
shows the top-5 accuracies computed here prompt by prompt."""

from __future__ import annotations

import json

import pytest
import torch

import tiny_world
from browser_fixtures import ARGS, CHROMIUM, needs_chromium
from explore_fixtures import DONORS, open_world_session, world
from weightgraft.data.encode import encode_prompt
from weightgraft.engine.graft import Graft
from weightgraft.experiments.models import load_tokenizer
from weightgraft.explore.grid import LAYER_GROUPS, MODEL_GROUPS
from weightgraft.explore.server import ServerThread

pytestmark = needs_chromium
PROMPTS = tiny_world.make_prompts()
PROMPT = PROMPTS[0]  # the page opens on the dataset's first prompt


@pytest.fixture(scope="module")
def tokenizer(root):
    paths, _ = world(root)
    return load_tokenizer(paths["pre"])


@pytest.fixture
def page(root, served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(served)
        page.wait_for_function("window.explore && window.explore.answered >= 1", timeout=30_000)
        yield page
        browser.close()
        assert not errors, errors


def _logprob(grafter, ids: list[int], target: int, grafts: list[Graft]) -> float:
    logits = grafter.last_logits(torch.tensor([ids]), grafts=grafts)[0]
    return float(torch.log_softmax(logits.float(), -1)[target])


def test_the_exact_map_equals_single_cell_grafts(page, grafter, tokenizer):
    page.select_option("#donor", "sft")
    page.click("#exact")
    page.wait_for_function("document.querySelector('#exact-status').textContent.includes('rows in')", timeout=60_000)
    values = page.evaluate("map.values")
    columns = page.evaluate("info.columns")
    enc = encode_prompt(tokenizer, PROMPT)
    ids, target = enc.scoring_ids, enc.scored_id
    base = _logprob(grafter, ids, target, [])
    n = len(ids)
    groups = {**MODEL_GROUPS, **LAYER_GROUPS}
    have = set(grafter.components)
    checked = 0
    for j, column in enumerate(columns):
        if column["layer"] not in (None, 1, 3):
            continue
        for p in (0, n - 1):
            comps = [c for c in groups[column["group"]] if c in have]
            layers = [0] if column["layer"] is None else [column["layer"]]
            graft = Graft([p], layers, comps, donor="sft")
            expected = _logprob(grafter, ids, target, [graft]) - base
            assert values[p][j] == pytest.approx(expected, abs=2e-5), (column, p)
            checked += 1
    assert checked >= 20
    legend = page.locator("#exact-info").text_content()
    assert "sft grafted in that cell alone" in legend and "correlation" in legend
    assert page.locator("#exact-info .scale").count() == 1
    assert page.locator("td.cell[style*='background']").count() > 0
    assert page.locator("#map-legend").text_content().strip().startswith("Exact effects from sft")
    answered = page.evaluate("window.explore.answered")
    page.select_option("#dataset", PROMPTS[3].id)  # a new prompt: the old prompt's map and analyses go
    page.wait_for_function(f"window.explore.answered > {answered}", timeout=30_000)
    assert page.locator("#exact-info").text_content() == "" and page.locator("#map-legend").is_hidden()


def test_the_logit_lens_draws_a_line_per_model(page, grafter, tokenizer):
    page.click("#quick button[data-sel='FE+LT']")
    page.wait_for_function("window.explore.answered >= 2", timeout=30_000)
    page.click("#lens-button")
    page.wait_for_selector("#lens-plot polyline", timeout=30_000)
    names = page.locator("#lens-plot polyline").evaluate_all("(ls) => ls.map((l) => l.dataset.name)")
    assert names == ["recipient", *DONORS, "graft"]
    rows = page.locator("#lens-table tr").all_text_contents()
    enc = encode_prompt(tokenizer, PROMPT)
    logits = grafter.last_logits(torch.tensor([enc.scoring_ids]))[0]
    rank = int((logits > logits[enc.scored_id]).sum()) + 1
    recipient = next(r for r in rows if r.startswith("recipient"))
    assert recipient.endswith(f"{rank}, {float(torch.log_softmax(logits.float(), -1)[enc.scored_id]):.3f}")


def test_many_prompts_show_the_accuracies_computed_here(page, grafter, tokenizer):
    page.fill("#many-count", str(len(PROMPTS)))
    page.click("#many-button")
    page.wait_for_selector("#many-table", timeout=60_000)
    cells = page.locator("#many-table tr >> nth=1").locator("td").all_text_contents()
    hits = []
    for prompt in PROMPTS:
        enc = encode_prompt(tokenizer, prompt)
        rows = [None, *(Graft("all", "all", "all", donor=d) for d in DONORS)]
        logits = grafter.last_logits(torch.tensor([enc.scoring_ids]).expand(len(rows), -1), row_grafts=rows)
        hits.append([float((row.topk(5).indices == enc.scored_id).any()) for row in logits])
    means = torch.tensor(hits).mean(0)
    for k in range(len(DONORS) + 1):
        assert cells[k].startswith(f"{float(means[k]):.3f} ["), (k, cells[k])
    assert f"{len(PROMPTS)} prompts" in page.locator("#many").text_content()


def test_a_session_saved_to_a_file_opens_again_with_its_history(page, tmp_path):
    page.click("#quick button[data-sel='FE+LT']")
    page.wait_for_function("window.explore.answered >= 2", timeout=30_000)
    page.click("#pin")
    page.wait_for_function("window.explore.answered >= 3", timeout=30_000)
    page.click("#quick button[data-sel='LT']")
    page.wait_for_function("window.explore.answered >= 4", timeout=30_000)
    cells, pins = page.locator("td.cell.on").count(), page.locator("#compare th.pin").count()
    assert cells > 0 and pins == 1
    with page.expect_download() as download:
        page.click("#save-session")
    saved = tmp_path / "session.json"
    download.value.save_as(saved)
    data = json.loads(saved.read_text())
    assert data["kind"] == "weightgraft-explore-session" and data["models"]["recipient"]["name"]
    assert len(data["history"]["undo"]) == 3

    page.click("#clear")
    page.wait_for_function("window.explore.answered >= 5", timeout=30_000)
    page.select_option("#dataset", PROMPTS[3].id)  # another prompt: pins cleared
    page.wait_for_function("window.explore.answered >= 6", timeout=30_000)
    assert page.locator("td.cell.on").count() == 0 and page.locator("#compare th.pin").count() == 0
    page.set_input_files("#open-session", str(saved))
    page.wait_for_function("window.explore.answered >= 7", timeout=30_000)
    assert page.locator("td.cell.on").count() == cells and page.locator("#compare th.pin").count() == 1
    assert page.input_value("#text") == PROMPT.text
    page.click("#undo")  # the saved history: back to FE+LT
    page.wait_for_function("window.explore.answered >= 8", timeout=30_000)
    assert page.locator("td.cell.on").count() != cells

    data["models"]["recipient"]["name"] = "another-model"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    page.set_input_files("#open-session", str(other))
    page.wait_for_function("document.querySelector('#error').textContent.includes('another-model')", timeout=10_000)
    assert "start it with those" in page.locator("#error").text_content()


def test_a_click_is_answered_while_an_integrated_map_waits_between_its_passes(root):
    """Slow work does not hold up clicks: an integrated attribution takes the model lock a pass at
    a time, so a click made while it runs is answered before the map is done (here the map is
    held between its first and second pass until the click's answer is on the page)."""
    import threading
    from contextlib import contextmanager

    from playwright.sync_api import sync_playwright

    session = open_world_session(root)
    gate, own = threading.Event(), session.latest_only

    def gated(kind: str):
        running, passes = own(kind), []

        @contextmanager
        def held():
            if kind == "attribute" and passes:
                gate.wait(60)  # outside the lock: the map waits before its second pass
            passes.append(1)
            with running():
                yield

        return held

    session.latest_only = gated
    server = ServerThread(session)
    url = server.start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(url)
            page.wait_for_function("window.explore.answered >= 1", timeout=30_000)
            page.select_option("#method", "integrated")
            page.click("#attribute")
            page.click("td.cell[data-group='O'][data-layer='2'][data-pos='1']")
            page.wait_for_function("window.explore.answered >= 2", timeout=30_000)
            assert not gate.is_set() and page.locator("#map-legend").is_hidden()  # the map is still waiting
            assert page.locator("td.cell.on").count() == 1
            gate.set()
            page.wait_for_selector("#map-legend:not([hidden])", timeout=60_000)
            browser.close()
    finally:
        gate.set()
        server.stop()


def _alpha(colour: str) -> float:
    """The alpha of a computed `rgb(...)`/`rgba(...)` colour."""
    parts = colour[colour.index("(") + 1 : -1].split(",")
    return float(parts[3]) if len(parts) == 4 else 1.0


def test_the_exact_map_stays_readable_with_a_large_graft(page):
    """Before: the colour scale was set by the one largest cell, a grafted cell's 3px outline hid its
    colour, and the leave-one-out list was every cell, unsorted (363 lines on SmolLM2)."""
    import io

    from PIL import Image

    page.select_option("#donor", "sft")
    page.click("#quick button[data-sel='FE+LT']")
    page.wait_for_function("window.explore.answered >= 2", timeout=30_000)
    page.click("#exact")
    page.wait_for_function("document.querySelector('#exact-status').textContent.includes('rows in')", timeout=60_000)
    values = [abs(v) for row in page.evaluate("map.values") for v in row if v != 0]
    alphas = page.locator("td.cell[style*='background']").evaluate_all(
        "(tds) => tds.map((td) => getComputedStyle(td).backgroundColor)"
    )
    full = sum(_alpha(a) == 1.0 for a in alphas)
    assert full >= 0.04 * len(values) and full > 1  # the top 5% saturate, not the one largest cell
    assert "clipped at" in page.locator("#map-legend").text_content()
    # The leave-one-out list: the 20 largest |effect| first, the rest behind "show all".
    items = page.locator("#leave-one-out li").all_text_contents()
    effects = [abs(float(t.rpartition(": ")[2])) for t in items]
    assert len(items) == 20 and effects == sorted(effects, reverse=True)
    page.click("#leave-one-out-all")
    assert page.locator("#leave-one-out li").count() == len(page.evaluate("map.leave_one_out.cells")) > 20
    # A grafted cell shows its map colour over most of it (its donor: a small corner).
    cell = page.locator("td.cell.on[style*='background']").first
    colour = cell.evaluate("(td) => getComputedStyle(td).backgroundColor")
    parts = [float(x) for x in colour[colour.index("(") + 1 : -1].split(",")]
    a = parts[3] if len(parts) == 4 else 1.0
    want = [c * a + 255 * (1 - a) for c in parts[:3]]  # over the page's white
    pixels = list(Image.open(io.BytesIO(cell.screenshot())).convert("RGB").get_flattened_data())
    close = sum(all(abs(p - w) <= 6 for p, w in zip(px, want)) for px in pixels)
    assert close >= 0.6 * len(pixels), (close, len(pixels), colour)
