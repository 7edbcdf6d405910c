"""Experts in the explorer, in a real browser (Debian's Chromium, driven by Playwright): on a tiny
Mixtral, `+` on a layer's FFN column splits it into expert cells; a clicked expert cell shows the
numbers of the library's `Graft(experts=[e])` computed here, the Python names it, the address keeps
it, and the attribution and exact maps colour the expert cells. A dense model's FFN has no `+`."""

from __future__ import annotations

import pytest
import torch

import tiny_world
from browser_fixtures import needs_chromium
from explore_fixtures import moe_world, open_moe_session
from weightgraft.data.encode import encode_prompt
from weightgraft.engine.graft import Graft
from weightgraft.engine.grafter import Grafter
from weightgraft.experiments.models import load_model, load_tokenizer
from weightgraft.explore.server import ServerThread

pytestmark = needs_chromium
PROMPT = tiny_world.make_prompts()[0]  # the page opens on the dataset's first prompt
EXPERTS, LAYERS = 4, 3  # tiny_model_fixtures' MoE configs


@pytest.fixture(scope="module")
def served(root):
    server = ServerThread(open_moe_session(root))
    yield server.start()
    server.stop()


@pytest.fixture(scope="module")
def grafter(root):
    """A Grafter of its own on the same model folders: the numbers the page must show."""
    paths, _ = moe_world(root)
    return Grafter(
        load_model(paths["pre"], "cpu", "float32"), donors={"sft": load_model(paths["sft"], "cpu", "float32")}
    )


def _answered(page, count: int) -> None:
    page.wait_for_function(f"window.explore.answered >= {count}", timeout=30_000)


def _graft_probs(page) -> list[str]:
    return page.locator(".pred[data-name='graft'] .prob").all_text_contents()


def _library_probs(grafter, ids: list[int], grafts: list[Graft]) -> list[str]:
    probs = torch.softmax(grafter.last_logits(torch.tensor([ids]), grafts=grafts)[0].float(), -1)
    return [f"{float(p):.4f}" for p in torch.topk(probs, 5).values]


def _expert_cell(layer: int, expert: int, pos: int) -> str:
    return f"td.cell[data-group='FFN'][data-layer='{layer}'][data-expert='{expert}'][data-pos='{pos}']"


def test_split_an_ffn_column_click_experts_and_the_numbers_are_the_librarys(served, page, grafter, root):
    paths, _ = moe_world(root)
    enc = encode_prompt(load_tokenizer(paths["pre"]), PROMPT)
    ids, lt = enc.input_ids, len(enc.input_ids) - 1
    page.goto(served)
    _answered(page, 1)
    assert page.locator("td.cell[data-expert]").count() == 0  # the default grid has no experts
    assert page.locator("button.ex").count() == LAYERS  # a + on each layer's FFN, none elsewhere
    assert "router stays the recipient's" in " ".join(page.locator("#experts-hint").text_content().split())

    page.click("button.ex[data-layer='1']")
    assert page.locator("th.col.expert").count() == EXPERTS and page.locator("th.col.head").count() == 0
    assert page.locator("td.cell[data-expert][data-layer='1']").count() == EXPERTS * len(ids)
    assert "e=1" in page.url
    assert "router stays the recipient's" in " ".join(
        page.locator("th.col.expert").first.get_attribute("title").split()
    )
    # The two experts that change the scoring position most: the recipient's router picks them there.
    base = grafter.last_logits(torch.tensor([ids]))[0]
    moved = [
        (grafter.last_logits(torch.tensor([ids]), grafts=Graft([lt], [1], "experts", "sft", experts=[e]))[0] - base)
        .abs()
        .max()
        for e in range(EXPERTS)
    ]
    first, second = sorted(sorted(range(EXPERTS), key=lambda e: -moved[e])[:2])
    assert sorted(moved)[0] < 1e-5  # an expert the router does not pick there changes nothing
    page.click(_expert_cell(1, second, lt))
    _answered(page, 2)
    page.click(_expert_cell(1, first, lt))
    _answered(page, 3)
    expected = _library_probs(grafter, ids, [Graft([lt], [1], ["experts"], "sft", experts=[first, second])])
    assert _graft_probs(page) == expected
    assert expected != _library_probs(grafter, ids, [])  # the experts changed the prediction
    assert f"experts=[{first}, {second}]" in page.locator("#python").text_content()
    assert page.locator("td.cell.on[data-expert]").count() == 2

    # The address alone gives the same grid and numbers, in a new page.
    other = page.context.new_page()
    other.goto(page.url)
    _answered(other, 1)
    assert _graft_probs(other) == expected
    assert other.locator("th.col.expert").count() == EXPERTS
    assert other.locator(f"{_expert_cell(1, second, lt)}.on").count() == 1
    other.close()

    # Joined again, the cell with some experts grafted is half filled; the whole cell drops them.
    page.click("button.ex[data-layer='1']")
    assert page.locator("th.col.expert").count() == 0 and page.locator("td.cell.part").count() == 1
    assert "some experts from sft" in page.locator("td.cell.part").get_attribute("title")
    page.click(f"td.cell[data-group='FFN'][data-layer='1'][data-pos='{lt}']")
    _answered(page, 4)
    assert _graft_probs(page) == _library_probs(grafter, ids, [Graft([lt], [1], ["router", "experts"], "sft")])
    assert page.locator("td.cell.part").count() == 0


def test_the_maps_colour_the_expert_cells(served, page):
    page.goto(served)
    _answered(page, 1)
    page.click("button.ex[data-layer='2']")
    page.click("#attribute")
    page.wait_for_selector("#map-legend:not([hidden])", timeout=60_000)
    cells = page.locator("td.cell[data-expert]")
    titles = cells.evaluate_all("(tds) => tds.map((td) => td.title)")
    assert titles and all("attribution" in t for t in titles)
    page.click("#exact")
    page.wait_for_function("document.querySelector('#exact-info').textContent.length > 0", timeout=60_000)
    titles = cells.evaluate_all("(tds) => tds.map((td) => td.title)")
    assert all("exact effect" in t for t in titles)


def test_a_dense_models_ffn_has_no_experts(page, tmp_path):
    from explore_fixtures import open_world_session

    server = ServerThread(open_world_session(tmp_path))
    try:
        page.goto(server.start())
        _answered(page, 1)
        assert page.locator("button.hx").count() > 0 and page.locator("button.ex").count() == 0
        assert page.locator("#experts-hint").text_content() == ""
    finally:
        server.stop()
