"""The explorer in a real browser: Debian's Chromium (`apt-get install chromium`; `make env` and
`make test` install it when run as root), driven by Playwright for Python, never a browser that a
tool downloads itself.

On the tests' tiny world: load the page, click FE+LT and compare the probabilities shown with
`Grafter.last_logits` of the same graft, built here from the dataset's spans; ungraft a cell;
undo and redo; reopen the address; run the Python the page shows; bad input shows a message.
The script that takes the README's pictures (benchmarks/explore_screenshots.py) runs to the end.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import json
from pathlib import Path

import pytest
import torch

import tiny_world
from browser_fixtures import needs_chromium
from explore_fixtures import DONORS, EVERY_WEIGHT, open_world_session, world
from weightgraft.data.encode import encode_prompt
from weightgraft.engine.graft import Graft
from weightgraft.experiments.models import load_model, load_tokenizer
from weightgraft.explore.server import ServerThread

SCREENSHOTS = Path(__file__).resolve().parents[2] / "benchmarks" / "explore_screenshots.py"

pytestmark = needs_chromium
PROMPT = tiny_world.make_prompts()[0]  # the page opens on the dataset's first prompt (paper_1)


def _answered(page, count: int) -> None:
    page.wait_for_function(f"window.explore.answered >= {count}", timeout=30_000)


def _shown(page, name: str = "graft") -> dict:
    box = page.locator(f".pred[data-name='{name}']")
    return {
        "tokens": box.locator(".tok").all_text_contents(),
        "probs": box.locator(".prob").all_text_contents(),
        "rank": box.locator(".rank").text_content(),
        "tprob": box.locator(".tprob").text_content(),
    }


def _expected(grafter, tokenizer, ids: list[int], target_id: int, grafts: list[Graft], k: int = 5) -> dict:
    probs = torch.softmax(grafter.last_logits(torch.tensor([ids]), grafts=grafts)[0].float(), -1)
    top = torch.topk(probs, k)
    return {
        "ids": top.indices.tolist(),
        "probs": [f"{float(p):.4f}" for p in top.values],
        "rank": str(int((probs > probs[target_id]).sum()) + 1),
        "tprob_value": float(probs[target_id]),
    }


def _printed_equal(shown: str, value: float) -> bool:
    """`shown` is `value` to the precision printed (4 decimals, or 3 significant digits as 1.23e-5)."""
    mantissa, _, exponent = shown.partition("e")
    decimals = len(mantissa.partition(".")[2])
    unit = 10.0 ** (int(exponent or 0) - decimals)
    return abs(float(shown) - value) <= unit / 2 + 1e-12


def _same(shown: dict, expected: dict, tokenizer) -> None:
    assert shown["probs"] == expected["probs"]
    assert shown["rank"] == expected["rank"] and _printed_equal(shown["tprob"], expected["tprob_value"])
    tokens = [tokenizer.decode([i]) for i in expected["ids"]]
    assert [t.strip('"') for t in shown["tokens"]] == tokens


def _cells_on(page) -> int:
    return page.locator("td.cell.on").count()


def test_click_fe_lt_ungraft_undo_reload_and_run_the_python(served, page, grafter, root):
    paths, _ = world(root)
    tokenizer = load_tokenizer(paths["pre"])
    enc = encode_prompt(tokenizer, PROMPT)
    ids, target = enc.input_ids, enc.target_ids[0]
    lt = len(ids) - 1
    fe_lt = sorted(enc.positions["first_entity"] + [lt])

    page.goto(served)
    _answered(page, 1)
    assert page.locator("th.tok").count() == len(ids)
    _same(_shown(page), _expected(grafter, tokenizer, ids, target, []), tokenizer)

    page.click("button[data-sel='FE+LT']")
    _answered(page, 2)
    graft_fe_lt = [Graft(fe_lt, "all", EVERY_WEIGHT, donor="sft")]
    expected_fe_lt = _expected(grafter, tokenizer, ids, target, graft_fe_lt)
    _same(_shown(page), expected_fe_lt, tokenizer)
    columns = 1 + 4 * 4  # EMB and ATTN, O, FFN, NORMS of 4 layers; not FNORM or UNEMB
    assert _cells_on(page) == len(fe_lt) * columns
    address = page.url

    # Ungraft one cell: O of layer 2 at the last token.
    page.click(f"td.cell[data-group='O'][data-layer='2'][data-pos='{lt}']")
    _answered(page, 3)
    fe = enc.positions["first_entity"]
    without_o2 = [
        Graft(fe, "all", EVERY_WEIGHT, donor="sft"),
        Graft([lt], "all", [c for c in EVERY_WEIGHT if c != "o"], donor="sft"),
        Graft([lt], [0, 1, 3], ["o"], donor="sft"),
    ]
    _same(_shown(page), _expected(grafter, tokenizer, ids, target, without_o2), tokenizer)
    assert _cells_on(page) == len(fe_lt) * columns - 1

    page.click("#undo")
    _answered(page, 4)
    _same(_shown(page), expected_fe_lt, tokenizer)
    assert page.url == address
    page.click("#redo")
    _answered(page, 5)
    assert _cells_on(page) == len(fe_lt) * columns - 1
    page.click("#undo")
    _answered(page, 6)

    # The address alone restores the view, in a new page.
    other = page.context.new_page()
    other.goto(address)
    _answered(other, 1)
    _same(_shown(other), expected_fe_lt, tokenizer)
    assert _cells_on(other) == len(fe_lt) * columns
    assert other.input_value("#donor") == "sft" and other.input_value("#dataset") == PROMPT.id

    # The Python shown, run as it stands, gives the numbers shown.
    scope: dict = {}
    exec(other.locator("#python").text_content(), scope)  # noqa: S102 - what a user copies
    top = torch.topk(scope["probs"], 5)
    assert [f"{float(p):.4f}" for p in top.values] == expected_fe_lt["probs"]
    assert other.locator("#condition").text_content().count("positions: FE+LT") == 1
    other.close()


# f1-paper_1: the task donor lowers the target's p here, so its gain has no recovery ("–").
COMPARED = tiny_world.make_prompts()[3]
O_FFN = ["o", "gate", "up", "down"]


def _library_column(grafter, row: list[int], prompt_len: int, target_ids: list[int], grafts, rival: int) -> dict:
    """What the comparison must show for one graft, from `Grafter.logits` on prompt + target[:-1]."""
    logits = grafter.logits(torch.tensor([row]), grafts=grafts)[0].float()
    logp = torch.log_softmax(logits[prompt_len - 1 :], -1)
    step, target = logits[prompt_len - 1], target_ids[0]
    return {
        "prob": float(logp[0, target].exp()),
        "rank": int((step > step[target]).sum()) + 1,
        "logprob": float(logp[0, target]),
        "logit_diff": float(step[target] - step[rival]),
        "target_logprob": float(sum(logp[j, t] for j, t in enumerate(target_ids))),
    }


def _pin_two_grafts(page, rival_text: str) -> None:
    """On COMPARED: pin FE+LT from sft and LT x Q4 x O+FFN from task, type a competing answer."""
    page.select_option("#dataset", COMPARED.id)
    _answered(page, 2)
    page.click("button[data-sel='FE+LT']")
    _answered(page, 3)
    page.click("#pin")
    _answered(page, 4)
    page.click("#clear")
    _answered(page, 5)
    page.select_option("#donor", "task")
    _answered(page, 6)
    page.select_option("#sel-pos", "LT")
    page.select_option("#sel-layers", "Q4")
    page.select_option("#sel-comps", "O+FFN")
    page.click("#sel-add")
    _answered(page, 7)
    page.click("#pin")
    _answered(page, 8)
    page.fill("#rival", rival_text)
    page.press("#rival", "Enter")
    _answered(page, 9)


def _compared_expectations(grafter, tokenizer) -> tuple[list[dict], int]:
    """The library's numbers for recipient, sft, task, the current graft and the two pins."""
    enc = encode_prompt(tokenizer, COMPARED)
    ids, target_ids = enc.input_ids, enc.target_ids
    row, n = ids + target_ids[:-1], len(ids)
    forced = list(range(n, len(row)))  # teacher-forced target tokens get the last token's grafts
    fe_lt = sorted(enc.positions["first_entity"] + [n - 1]) + forced
    pin_a = [Graft(fe_lt, "all", EVERY_WEIGHT, donor="sft")]
    pin_b = [Graft([n - 1, *forced], [3], O_FFN, donor="task")]
    recipient_top = int(grafter.last_logits(torch.tensor([ids]))[0].argmax())
    rival = (
        recipient_top
        if recipient_top != target_ids[0]
        else int(grafter.last_logits(torch.tensor([ids]))[0].topk(2).indices[1])
    )
    everywhere = [[Graft("all", "all", "all", donor=d)] for d in DONORS]
    columns = [_library_column(grafter, row, n, target_ids, g, rival) for g in [[], *everywhere, pin_b, pin_a, pin_b]]
    base, donor_p = columns[0], {d: columns[1 + i]["prob"] for i, d in enumerate(DONORS)}
    sources = [set(), {"sft"}, {"task"}, {"task"}, {"sft"}, {"task"}]  # recovery only of a donor grafted from
    for c, used in zip(columns, sources):
        c["delta_logprob"] = c["logprob"] - base["logprob"]
        c["delta_target_logprob"] = c["target_logprob"] - base["target_logprob"]
        c["recovery"] = {
            d: (c["prob"] - base["prob"]) / (p - base["prob"]) if p - base["prob"] >= 0.01 and d in used else None
            for d, p in donor_p.items()
        }
    return columns, rival


def _compared_cell(page, col: int, key: str) -> str:
    return page.locator(f"#compare tr[data-metric='{key}'] td[data-col='{col}']").text_content()


def test_pinned_grafts_compare_as_the_library_computes_them(served, page, grafter, root):
    paths, _ = world(root)
    tokenizer = load_tokenizer(paths["pre"])
    expected, rival = _compared_expectations(grafter, tokenizer)
    assert expected[2]["recovery"]["task"] is None  # the case of "–" is on this prompt
    page.goto(served)
    _answered(page, 1)
    _pin_two_grafts(page, " " + tokenizer.decode([rival]))
    kinds = page.locator("#compare thead th[data-kind]").evaluate_all("(ths) => ths.map((t) => t.dataset.kind)")
    assert kinds == ["recipient", "donor", "donor", "current", "pin", "pin"]
    for col, want in enumerate(expected):
        shown = functools.partial(_compared_cell, page, col)
        assert _printed_equal(shown("prob"), want["prob"]) and shown("rank") == str(want["rank"])
        for key in ("logprob", "delta_logprob", "logit_diff", "target_logprob", "delta_target_logprob"):
            assert _printed_equal(shown(key), want[key]), (col, key, shown(key), want[key])
        for donor in DONORS:
            value = want["recovery"][donor]
            assert (
                shown(f"recovery:{donor}") == "–"
                if value is None
                else _printed_equal(shown(f"recovery:{donor}"), value)
            )
    # A pin's "load" puts its graft back on the grid; a new prompt clears the pins.
    page.click("#compare th.pin >> nth=0 >> button.load")
    _answered(page, 10)
    assert _cells_on(page) == 3 * 17  # FE+LT: 3 positions x every weight's 17 columns
    page.select_option("#dataset", PROMPT.id)
    _answered(page, 11)
    assert page.locator("#compare th.pin").count() == 0


def test_the_comparison_downloads_as_csv_and_json_with_the_library_numbers(served, page, grafter, root):
    paths, _ = world(root)
    tokenizer = load_tokenizer(paths["pre"])
    expected, rival = _compared_expectations(grafter, tokenizer)
    page.goto(served)
    _answered(page, 1)
    _pin_two_grafts(page, " " + tokenizer.decode([rival]))
    with page.expect_download() as csv_download:
        page.click("#csv")
    with page.expect_download() as json_download:
        page.click("#json")
    rows = list(csv.DictReader(io.StringIO(Path(csv_download.value.path()).read_text())))
    saved = json.loads(Path(json_download.value.path()).read_text())
    assert (
        [r["kind"] for r in rows]
        == [c["kind"] for c in saved["columns"]]
        == [*("recipient", "donor", "donor", "current", "pin", "pin")]
    )
    assert saved["prompt"] == COMPARED.text and saved["target"] == COMPARED.target
    assert {(r["prompt"], r["target"], r["competitor"]) for r in rows} == {
        (COMPARED.text, COMPARED.target, " " + tokenizer.decode([rival]))
    }
    for row, column, want in zip(rows, saved["columns"], expected):
        assert int(row["rank"]) == column["rank"] == want["rank"]
        for key in ("prob", "logprob", "delta_logprob", "logit_diff", "target_logprob", "delta_target_logprob"):
            assert float(row[key]) == pytest.approx(want[key], abs=1e-5) and column[key] == float(row[key])
        for donor in DONORS:
            value = want["recovery"][donor]
            if value is None:
                assert row[f"recovery_{donor}"] == "" and column["recovery"][donor] is None
            else:
                assert float(row[f"recovery_{donor}"]) == pytest.approx(value, rel=1e-4)
    # The pins' cells travel with their numbers: the first pin is FE+LT's 3 positions x 17 columns.
    assert sum(len(c["positions"]) for c in saved["columns"][4]["cells"]) == 3 * 17


def test_cells_a_donor_leaves_unchanged_are_marked_and_the_header_names_the_models(browser, root, tmp_path):
    """A donor equal to the recipient except in layer 1's MLP: every other cell is hatched for it
    (a click there changes nothing: the graft's numbers stay the recipient's); for sft, exactly the
    norms its perturbation left bit-identical."""
    from weightgraft.explore.open_session import open_session

    paths, data = world(root)
    half = load_model(paths["pre"], "cpu", "float32")
    with torch.no_grad():
        half.model.layers[1].mlp.down_proj.weight.add_(0.1)
    half.save_pretrained(tmp_path / "half")
    load_tokenizer(paths["pre"]).save_pretrained(tmp_path / "half")
    server = ServerThread(open_session(paths["pre"], {"sft": paths["sft"], "half": str(tmp_path / "half")}, data))
    url = server.start()
    try:
        context = browser.new_context(viewport={"width": 1300, "height": 1000})
        page = context.new_page()
        page.goto(url)
        _answered(page, 1)
        tokens, columns = page.locator("th.tok").count(), page.locator("th.col").count()
        # sft's finetune-like noise scales with each weight's spread: the all-ones norms stay as they are.
        pre, sft = load_model(paths["pre"], "cpu", "float32"), load_model(paths["sft"], "cpu", "float32")
        same_norms = [
            i
            for i, (a, b) in enumerate(zip(pre.model.layers, sft.model.layers))
            if torch.equal(a.input_layernorm.weight, b.input_layernorm.weight)
            and torch.equal(a.post_attention_layernorm.weight, b.post_attention_layernorm.weight)
        ]
        final_norm = int(torch.equal(pre.model.norm.weight, sft.model.norm.weight))  # FNORM: a column of its own
        assert same_norms and page.locator("td.cell.same").count() == tokens * (len(same_norms) + final_norm)
        assert page.locator("td.cell.same[data-group='NORMS']").count() == tokens * len(same_norms)
        page.select_option("#donor", "half")
        _answered(page, 2)
        assert page.locator("td.cell.same").count() == tokens * (columns - 1)
        assert page.locator("td.cell[data-group='FFN'][data-layer='1'].same").count() == 0
        page.click("td.cell[data-group='O'][data-layer='1'][data-pos='2']")  # hatched: nothing changes
        _answered(page, 3)
        assert _shown(page, "graft")["tprob"] == _shown(page, "recipient")["tprob"]
        size = sum(p.numel() for p in half.parameters())
        legend = page.locator("#models .legend").all_text_contents()
        assert [t.split(" (")[0].strip() for t in legend] == ["sft", "half"]
        assert f"({size / 1e3:.1f}k)" in legend[1] and paths["pre"] in page.locator("#models").text_content()
        assert page.locator("#models .legend .swatch.d1").count() == 1  # half's colour, as its cells
        context.close()
    finally:
        server.stop()


def test_copy_buttons_put_the_text_on_the_clipboard(served, browser):
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=served.rstrip("/"))
    page = context.new_page()
    page.goto(served)
    _answered(page, 1)
    page.click("button.copy[data-from='python']")
    assert page.evaluate("navigator.clipboard.readText()") == page.locator("#python").text_content()
    context.close()


def test_rows_columns_selections_and_donors(served, page):
    page.goto(served)
    _answered(page, 1)
    tokens = page.locator("th.tok").count()
    page.click("th.col >> nth=5")  # a whole column (O, layer 0 on this grid)
    _answered(page, 2)
    assert _cells_on(page) == tokens
    page.click("th.tok >> nth=0")  # a whole row, from the same donor
    _answered(page, 3)
    assert _cells_on(page) == tokens + 18  # the row's 19 columns (EMB, 16, FNORM, UNEMB), one of them already on
    assert page.locator("#condition").text_content() == "(none)"  # position 0 alone is no union of roles
    assert "not a union" in page.locator("#condition-note").text_content()
    page.click("#clear")
    _answered(page, 4)
    assert _cells_on(page) == 0
    page.select_option("#donor", "task")
    _answered(page, 5)
    page.select_option("#sel-pos", "LT")
    page.select_option("#sel-layers", "Q4")
    page.select_option("#sel-comps", "O+FFN")
    page.click("#sel-add")
    _answered(page, 6)
    assert page.locator("td.cell.on.d1").count() == 2  # O and FFN of the last layer at LT, from task
    condition = page.locator("#condition").text_content()
    assert "positions: LT" in condition and "layers: [3]" in condition and "donor: task" in condition


_GRID = """() => [...document.querySelectorAll('#grid td.cell')].map((td) =>
    [td.dataset.group, td.dataset.layer, td.dataset.pos, td.className, td.title, td.style.backgroundColor])"""


def test_a_click_redraws_only_its_cells_and_the_grid_reads_as_a_fresh_page(served, page):
    """The grid is drawn once per prompt and then changed cell by cell: after clicks on cells, rows,
    columns, another donor, an attribution map and its hiding, every cell's class, title and colour
    are those of a page opened afresh at the same address; the cells are the same elements as
    before the clicks, and a new prompt draws a new grid."""
    page.goto(served)
    _answered(page, 1)
    page.evaluate("document.querySelector('#grid td.cell').dataset.mark = 'first'")
    page.click("button[data-sel='FE+LT']")
    _answered(page, 2)
    page.click("td.cell[data-group='O'][data-layer='2'][data-pos='1']")
    _answered(page, 3)
    page.select_option("#donor", "task")
    _answered(page, 4)
    page.click("th.tok >> nth=2")
    _answered(page, 5)
    page.click("th.col >> nth=7")
    _answered(page, 6)
    # The last answer's timings gain their paint once its frame is shown. (Waiting for the next
    # 'explore-framed' event instead raced: the previous answer's frame could fire it first.)
    page.wait_for_function("'paint' in window.explore.timings", timeout=30_000)
    parts = page.evaluate("window.explore.timings")
    assert {"fetch", "read", "work", "json", "parse", "render", "paint"} <= set(parts)
    cell = page.locator("td.cell[data-group='FFN'][data-layer='1'][data-pos='2']")
    assert "on d1" in cell.get_attribute("class") and "from task" in cell.get_attribute("title")
    before_map = page.evaluate(_GRID)
    page.click("#attribute")
    page.wait_for_selector("#map-legend:not([hidden])", timeout=30_000)
    assert page.locator("#grid.map").count() == 1 and "attribution" in cell.get_attribute("title")
    page.click("#hide-map")
    assert page.evaluate(_GRID) == before_map
    assert page.locator("#grid td.cell[data-mark='first']").count() == 1  # not rebuilt

    fresh = page.context.new_page()
    fresh.goto(page.url)
    _answered(fresh, 1)
    assert fresh.evaluate(_GRID) == before_map
    fresh.close()

    page.fill("#text", "Ada Brook stars in")
    page.click("#apply")
    _answered(page, 7)
    assert page.locator("th.tok").count() == 5 and page.locator("#grid td.cell[data-mark]").count() == 0
    assert _cells_on(page) == 0


def test_bad_input_shows_a_message_and_the_page_goes_on(served, page):
    page.goto(served)
    _answered(page, 1)
    page.fill("#text", "Ada " * 300)
    page.click("#apply")
    _answered(page, 2)
    message = page.locator("#error").text_content()
    assert "at most" in message and "Traceback" not in message
    page.fill("#text", "Ada Brook stars in")
    page.fill("#target", " Cyril")
    page.click("#apply")
    _answered(page, 3)
    assert page.locator("#error").is_hidden()
    assert page.locator("th.tok").count() == 5 and page.locator("th.tok .role").count() == 0  # free text
    page.click("#generate")
    page.wait_for_function("document.querySelectorAll('#continuations div').length === 4", timeout=30_000)
    page.click("#attribute")
    page.wait_for_selector("#map-legend:not([hidden])", timeout=30_000)


def test_a_new_prompt_clears_the_continuations_and_long_python_lines_wrap(served, page):
    page.goto(served)
    _answered(page, 1)
    page.click("#generate")
    page.wait_for_function("document.querySelectorAll('#continuations div').length === 4", timeout=30_000)
    assert PROMPT.text in page.locator("#continuations").text_content()
    page.fill("#text", "Ada Brook stars in")
    page.fill("#target", " Cyril")
    page.click("#apply")
    _answered(page, 2)
    assert page.locator("#continuations").text_content() == ""  # not the old prompt's continuations
    page.click("th.tok >> nth=0")  # a whole row: a Graft line with every component, past 120 characters
    _answered(page, 3)
    # Every line of the Python and of the condition is in view: wrapped, none past the pane's edge.
    python = page.locator("#python").text_content()
    assert max(len(line) for line in python.splitlines()) > 120  # lines longer than the pane is wide
    for pane in ("#python", "#condition"):
        width = page.evaluate(
            f"(() => {{ const p = document.querySelector('{pane}'); return [p.scrollWidth, p.clientWidth]; }})()"
        )
        assert width[0] <= width[1], (pane, width)


def test_malformed_and_oversized_requests_leave_the_page_working(served, page):
    """Requests the page would never send, sent from it (and over urllib in test_explore_api.py):
    each gets a message, and the next click still answers."""
    page.goto(served)
    _answered(page, 1)
    statuses = page.evaluate(
        """async () => {
        const send = (body) => fetch('/api/predict', {method: 'POST', body}).then(async (r) => [r.status, (await r.json()).error]);
        return [await send('{oops'), await send(JSON.stringify({prompt: {text: 'x'.repeat(300000)}})),
                await send(JSON.stringify({prompt: {text: 'Ada'}, cells: 'all'}))];
    }"""
    )
    assert [s for s, _ in statuses] == [400, 413, 422]
    assert all(message and "Traceback" not in message for _, message in statuses)
    page.click("button[data-sel='LT']")
    _answered(page, 2)
    assert page.locator("#error").is_hidden() and _cells_on(page) == 17


def test_the_readme_pictures_script_on_the_builtin_model(browser, tmp_path):
    """benchmarks/explore_screenshots.py (which makes docs/explore*.png) runs to the end and keeps
    each picture small: on the built-in default models when they are cached (all of them, as
    `weightgraft explore` opens them, or the pretrained and relation models while the other
    finetunes are missing), else on the tests' tiny world; into a temporary folder either way."""
    from weightgraft.experiments.vocabulary import BUILTIN_ROLE_FIELDS, ModelRole
    from weightgraft.explore.open_session import open_session
    from weightgraft.training.builtin import default_home
    from weightgraft.training.builtin_specs import BUILTIN_VERSION

    spec = importlib.util.spec_from_file_location("explore_screenshots", SCREENSHOTS)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    models = default_home() / f"builtin-default-v{BUILTIN_VERSION}" / "models"
    folders = {"sft": "relation", "task": "task", "b2a": "relation_b2a", "freetext": "freetext"}
    assert set(folders) == set(BUILTIN_ROLE_FIELDS) - {ModelRole.PRE}
    cached = {name: str(models / f) for name, f in folders.items() if (models / f / "config.json").exists()}
    if (models / "pretrained" / "config.json").exists() and "sft" in cached:
        donors = cached if len(cached) == len(folders) else {"sft": cached["sft"]}
        session = open_session(str(models / "pretrained"), donors, models.parent / "data" / "relation")
    else:
        session = open_world_session(tmp_path / "world")
    server = ServerThread(session)
    url = server.start()
    try:
        sizes = script.take(url, tmp_path, split_layer=1, browser=browser)
    finally:
        server.stop()
    assert set(sizes) == {"explore.png", "explore_compare.png", "explore_exact.png", "explore_lens.png"}
    assert all(10_000 < size < 200_000 for size in sizes.values()), sizes


def test_a_wide_grid_keeps_its_tokens_in_view_pins_take_names_and_continuations_graft_the_target_way(
    served, browser, grafter, root
):
    """Before: the token column scrolled away with the layers, a pin's label was only its size, and
    the continuation left the generated tokens ungrafted while the whole target is scored with them
    grafted as the last token."""
    context = browser.new_context(viewport={"width": 500, "height": 900})  # a grid wider than the page
    page = context.new_page()
    try:
        page.goto(served)
        _answered(page, 1)
        scroller = page.locator("#grid-scroll")
        assert scroller.evaluate("(s) => s.scrollWidth > s.clientWidth + 100")
        token = page.locator("th.tok").first
        token.scroll_into_view_if_needed()
        before = token.bounding_box()["x"]
        scroller.evaluate("(s) => { s.scrollLeft = s.scrollWidth; }")
        page.wait_for_timeout(50)
        assert token.bounding_box()["x"] == pytest.approx(before, abs=1)
        assert token.evaluate(
            "(th) => { const r = th.getBoundingClientRect(); "
            "return document.elementFromPoint(r.left + 3, r.top + r.height / 2).closest('th.tok') === th; }"
        )
        # A pin named at pinning, and renamed after.
        page.click("button[data-sel='FE+LT']")
        _answered(page, 2)
        page.fill("#pin-name", "FE+LT from sft")
        page.click("#pin")
        _answered(page, 3)
        assert page.locator("#compare th.pin").first.text_content().startswith("FE+LT from sft")
        page.once("dialog", lambda dialog: dialog.accept("the paper's FE+LT"))
        page.click("#compare th.pin >> nth=0 >> button.rename")
        _answered(page, 4)
        assert page.locator("#compare th.pin").first.text_content().startswith("the paper's FE+LT")
        assert "the paper's FE+LT" in page.evaluate("decodeURIComponent(location.hash.replace(/\\+/g, ' '))")
        # The continuation grafts its generated tokens as the last token by default, as the target is scored.
        with page.expect_request("**/api/generate") as sent:
            page.click("#generate")
        assert json.loads(sent.value.post_data)["generated"] == "last"
        page.wait_for_function("document.querySelectorAll('#continuations div').length === 4", timeout=30_000)
        shown = page.locator("#continuations div").last.text_content()
        count = int(page.locator("#new-tokens").input_value())
    finally:
        context.close()
    tokenizer = load_tokenizer(world(root)[0]["pre"])
    enc = encode_prompt(tokenizer, PROMPT)
    fe_lt = sorted(enc.positions["first_entity"] + [len(enc.scoring_ids) - 1])
    ids = torch.tensor([enc.scoring_ids])
    graft = [Graft(fe_lt, "all", EVERY_WEIGHT, donor="sft")]
    made = grafter.generate(ids, row_grafts=[graft], generated="last", max_new_tokens=count, do_sample=False)
    new = made[0, ids.shape[1] :].tolist()
    eos = tokenizer.eos_token_id
    new = new[: new.index(eos)] if eos in new else new
    assert shown.startswith("graft") and shown.endswith("▸" + tokenizer.decode(new))
