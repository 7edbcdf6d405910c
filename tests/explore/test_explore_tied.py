"""Both definitions of "every weight" on a tied model (a tiny GPT-2 on the tiny world's tokenizer
and dataset): the grid's final norm and unembedding are columns of their own, and the position
buttons graft the clean definition or the authors' (the donor's unembedding with the token
embedding, docs/methodology.md), each saying which; the numbers are those of the runner's own
definitions (`resolve_for_model`) through the library's Grafter."""

from __future__ import annotations

import pytest
import torch

import tiny_world
from browser_fixtures import needs_chromium
from exp_fixtures import build_gpt2_models
from explore_fixtures import world
from weightgraft.engine.graft import Graft
from weightgraft.engine.grafter import Grafter
from weightgraft.experiments.conditions.components import resolve_for_model
from weightgraft.experiments.models import load_model
from weightgraft.explore.server import ServerThread

PROMPT = tiny_world.make_prompts()[0]  # the page opens on the dataset's first prompt


@pytest.fixture(scope="module")
def gpt2(root):
    torch.manual_seed(0)
    return build_gpt2_models(root / "gpt2")


@pytest.fixture(scope="module")
def tied_session(root, gpt2):
    from weightgraft.explore.open_session import open_session

    return open_session(gpt2["pre"], {"sft": gpt2["sft"]}, world(root)[1])


@pytest.fixture(scope="module")
def library(gpt2):
    return Grafter(load_model(gpt2["pre"], "cpu", "float32"), donors={"sft": load_model(gpt2["sft"], "cpu", "float32")})


def _probs(grafter: Grafter, ids: list[int], grafts: list[Graft]) -> torch.Tensor:
    return torch.softmax(grafter.last_logits(torch.tensor([ids]), grafts=grafts)[0].float(), -1)


def _fe_lt_cells(session, encoded, groups: list[str]):
    from weightgraft.explore.grid import Cells

    positions = tuple(encoded.selections["FE+LT"])
    return [Cells("sft", c.group, c.layer, positions) for c in session.grid.columns if c.group in groups]


def test_the_grid_builds_both_definitions_on_a_tied_model(tied_session, library):
    """Before: HEAD bundled the final norm with the unembedding, so the authors' FE+LT (the donor's
    unembedding at LT, the final norm the recipient's) could not be drawn."""
    info = tied_session.info()
    assert info["tied"] is True
    sets = info["component_sets"]
    assert "UNEMB" in sets["AUTHORS_WEIGHTS"] and "POS" not in sets["AUTHORS_WEIGHTS"]
    assert "POS" in sets["WEIGHTS"] and "UNEMB" not in sets["WEIGHTS"] and "FNORM" not in sets["AUTHORS_WEIGHTS"]
    encoded = tied_session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = list(encoded.selections["FE+LT"])
    for name, groups in (("AUTHORS_WEIGHTS", sets["AUTHORS_WEIGHTS"]), ("WEIGHTS", sets["WEIGHTS"])):
        shown = tied_session.predict(encoded, _fe_lt_cells(tied_session, encoded, groups), top_k=5)
        row = next(r for r in shown["predictions"] if r["name"] == "graft")
        components = resolve_for_model([name], library.components, tied=True)
        want = _probs(library, encoded.input_ids, [Graft(fe_lt, "all", components, donor="sft")])
        got = torch.tensor([t["prob"] for t in row["top"]])
        assert torch.allclose(want[[t["id"] for t in row["top"]]], got, atol=1e-6), name
    authors = resolve_for_model(["AUTHORS_WEIGHTS"], library.components, tied=True)
    clean = resolve_for_model(["WEIGHTS"], library.components, tied=True)
    a = _probs(library, encoded.input_ids, [Graft(fe_lt, "all", authors, donor="sft")])
    c = _probs(library, encoded.input_ids, [Graft(fe_lt, "all", clean, donor="sft")])
    assert (a - c).abs().max() > 1e-3  # the two definitions differ here: the test tells them apart


@needs_chromium
def test_the_position_buttons_say_which_definition_they_graft(tied_session, library, browser):
    server = ServerThread(tied_session)
    url = server.start()
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    page = context.new_page()
    try:
        page.goto(url)
        page.wait_for_function("window.explore && window.explore.answered >= 1", timeout=30_000)
        button = page.locator("#quick button[data-sel='FE+LT']")
        assert button.text_content() == "FE+LT (clean)" and page.locator("#definition-box").is_visible()
        assert "recipient's unembedding" in page.locator("#definition-note").text_content()
        page.select_option("#definition", "authors")
        assert button.text_content() == "FE+LT (authors')"
        assert "donor's unembedding" in button.get_attribute("title")
        button.click()
        page.wait_for_function("window.explore.answered >= 2", timeout=30_000)
        fe_lt = page.evaluate("view.selections['FE+LT']")
        unemb = page.locator("td.cell.on[data-group='UNEMB']").evaluate_all(
            "(tds) => tds.map((td) => Number(td.dataset.pos))"
        )
        assert sorted(unemb) == fe_lt and page.locator("td.cell.on[data-group='POS']").count() == 0
        assert page.locator("td.cell.on[data-group='FNORM']").count() == 0
        shown = page.locator(".pred[data-name='graft'] .prob").all_text_contents()
        ids = page.evaluate("view.predictions.find((r) => r.name === 'graft').top.map((t) => t.id)")
        encoded = tied_session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
        authors = resolve_for_model(["AUTHORS_WEIGHTS"], library.components, tied=True)
        want = _probs(library, encoded.input_ids, [Graft(fe_lt, "all", authors, donor="sft")])
        assert shown == [f"{float(want[i]):.4f}" for i in ids]
    finally:
        context.close()
        server.stop()
