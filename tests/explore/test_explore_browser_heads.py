"""Heads in the explorer, in a real browser (Debian's Chromium, driven by Playwright): split a
layer's O and ATTN into heads, click single heads, and the numbers shown are the library's
`Graft(heads=...)` computed here; the address, a pin, the exports and a saved session keep them."""

from __future__ import annotations

import json

import torch

import tiny_world
from browser_fixtures import needs_chromium
from explore_fixtures import world
from weightgraft.data.encode import encode_prompt
from weightgraft.engine.graft import Graft
from weightgraft.experiments.models import load_tokenizer

pytestmark = needs_chromium
PROMPT = tiny_world.make_prompts()[0]  # the page opens on the dataset's first prompt
HEADS, LAYERS = 4, 4  # the tiny world's Llama: 4 query heads (2 key-value heads), 4 layers
COLUMNS = 1 + 4 * LAYERS + 2  # EMB, ATTN/O/FFN/NORMS of each layer, FNORM, UNEMB


def _answered(page, count: int) -> None:
    page.wait_for_function(f"window.explore.answered >= {count}", timeout=30_000)


def _graft_probs(page) -> list[str]:
    return page.locator(".pred[data-name='graft'] .prob").all_text_contents()


def _library_probs(grafter, ids: list[int], grafts: list[Graft]) -> list[str]:
    probs = torch.softmax(grafter.last_logits(torch.tensor([ids]), grafts=grafts)[0].float(), -1)
    return [f"{float(p):.4f}" for p in torch.topk(probs, 5).values]


def _head_cell(layer: int, group: str, head: int, pos: int) -> str:
    return f"td.cell[data-group='{group}'][data-layer='{layer}'][data-head='{head}'][data-pos='{pos}']"


def test_split_a_layer_click_heads_and_the_numbers_are_the_librarys(served, page, grafter, root):
    paths, _ = world(root)
    enc = encode_prompt(load_tokenizer(paths["pre"]), PROMPT)
    ids, lt = enc.input_ids, len(enc.input_ids) - 1
    page.goto(served)
    _answered(page, 1)
    assert page.locator("td.cell[data-head]").count() == 0  # the default grid has no heads
    assert page.locator("tbody tr").first.locator("td.cell").count() == COLUMNS

    page.locator("button.hx[data-layer='1']").first.click()  # on ATTN layer 1: its ATTN and O split
    split = page.locator("th.col.head").count()
    assert split == 2 * HEADS and page.locator("td.cell[data-head][data-layer='1']").count() == split * len(ids)
    assert "h=1" in page.url
    page.click(_head_cell(1, "O", 2, lt))
    _answered(page, 2)
    page.click(_head_cell(1, "ATTN", 3, lt))
    _answered(page, 3)
    grafts = [
        Graft([lt], [1], ["o"], "sft", heads=[2]),
        Graft([lt], [1], ["q"], "sft", heads=[3]),
        Graft([lt], [1], ["k", "v"], "sft", heads=[1]),  # query head 3 reads key-value head 1
    ]
    expected = _library_probs(grafter, ids, grafts)
    assert _graft_probs(page) == expected
    python = page.locator("#python").text_content()
    assert "heads=[2]" in python and "heads=[3]" in python and "heads=[1]" in python
    assert page.locator("td.cell.on[data-head]").count() == 2

    # The address alone gives the same grid and numbers, in a new page.
    address = page.url
    other = page.context.new_page()
    other.goto(address)
    _answered(other, 1)
    assert _graft_probs(other) == expected
    assert other.locator("th.col.head").count() == split
    assert other.locator(f"{_head_cell(1, 'O', 2, lt)}.on").count() == 1
    other.close()

    # Joined again, the layer's cells with some heads grafted are half filled; a whole cell drops its heads.
    page.locator("button.hx[data-layer='1']").last.click()
    assert page.locator("th.col.head").count() == 0 and page.locator("td.cell.part").count() == 2
    page.click(f"td.cell[data-group='O'][data-layer='1'][data-pos='{lt}']")
    _answered(page, 4)
    assert _graft_probs(page) == _library_probs(grafter, ids, [*grafts[1:], Graft([lt], [1], ["o"], "sft")])
    assert page.locator("td.cell.part").count() == 1
    # Undo brings the heads back, and leaves the layers split as they are (a view, not a graft).
    page.locator("button.hx[data-layer='1']").first.click()
    page.click("#undo")
    _answered(page, 5)
    assert _graft_probs(page) == expected and page.locator("th.col.head").count() == split


def test_all_heads_split_pin_and_saved_session(served, page, grafter, root, tmp_path):
    paths, _ = world(root)
    enc = encode_prompt(load_tokenizer(paths["pre"]), PROMPT)
    ids = enc.input_ids
    page.goto(served)
    _answered(page, 1)
    page.click("#heads")
    assert page.locator("th.col.head").count() == 2 * HEADS * LAYERS
    assert page.locator("#heads").text_content() == "join heads"
    page.click("th.col.head[data-col='3']")  # the column header of ATTN layer 0's head 1: every position
    _answered(page, 2)
    assert page.locator("td.cell.on").count() == len(ids)
    page.click("#pin")
    _answered(page, 3)
    pin = page.locator("#compare tbody tr[data-metric='prob'] td.pin").text_content()
    everywhere = list(range(len(ids)))
    grafts = [Graft(everywhere, [0], ["q"], "sft", heads=[1]), Graft(everywhere, [0], ["k", "v"], "sft", heads=[0])]
    logits = grafter.logits(torch.tensor([ids]), grafts=grafts)[0, -1]
    target = enc.target_ids[0]
    assert abs(float(pin) - float(torch.softmax(logits.float(), -1)[target])) < 1e-4

    with page.expect_download() as download:
        page.click("#save-session")
    saved = tmp_path / "session.json"
    download.value.save_as(saved)
    data = json.loads(saved.read_text())
    assert data["state"]["heads"] == list(range(LAYERS))
    page.click("#clear")
    page.click("#heads")
    _answered(page, 4)
    assert page.locator("th.col.head").count() == 0
    page.set_input_files("#open-session", str(saved))
    _answered(page, 5)
    assert page.locator("th.col.head").count() == 2 * HEADS * LAYERS
    assert page.locator("td.cell.on[data-head='1'][data-group='ATTN']").count() == len(ids)


def test_the_maps_colour_the_head_cells(served, page):
    page.goto(served)
    _answered(page, 1)
    page.locator("button.hx[data-layer='2']").first.click()
    page.click("#attribute")
    page.wait_for_selector("#map-legend:not([hidden])", timeout=60_000)
    head_cells = page.locator("td.cell[data-head]")
    titles = head_cells.evaluate_all("(tds) => tds.map((td) => td.title)")
    assert titles and all("attribution" in t for t in titles)
    page.click("#exact")
    page.wait_for_function("document.querySelector('#exact-info').textContent.length > 0", timeout=60_000)
    titles = head_cells.evaluate_all("(tds) => tds.map((td) => td.title)")
    assert all("exact effect" in t for t in titles)
    page.locator("button.hx[data-layer='1']").first.click()  # split after the map ran: no values there
    unrun = page.locator("td.cell[data-head][data-layer='1']").evaluate_all("(tds) => tds.map((td) => td.title)")
    assert unrun and not any("exact effect" in t for t in unrun)
