"""The paper presets in the authors' fidelity, per architecture family: exactly what the authors'
code grafted (conditions.md), as the engine resolves it on each model.

Families: GPT-2 (a position embedding `wpe`, tied unembedding), GPT-NeoX (untied), a tied Llama,
and an untied Llama of 6 layers (n % 4 = 2, where the authors' hybrid band splits). For every
condition of every paper preset the test checks the components, the donor per layer, and the
unembedding that scores each row (the donor's exactly in the rows conditions.md lists, on tied
models only), and which rows get a clean twin beside them. The expectations are written here
from conditions.md, not read from the presets.
"""

from __future__ import annotations

import pytest

from tiny_model_fixtures import make_model
from tiny_world import base_config, build_tokenizer, make_prompts
from weightgraft.adapters import adapter_for
from weightgraft.data.encode import encode_prompt
from weightgraft.data.templates import in_authors_wording
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.methods import engine_graft
from weightgraft.experiments.plan.selection import ModelFacts, experiment_conditions, ties_embeddings
from weightgraft.paper.presets import PRESETS  # noqa: F401  (registers the presets the configs name)

# family -> (fixture arch, config overrides, tied, has a position embedding)
FAMILIES = {
    "gpt2": ("gpt2", {"n_layer": 4}, True, True),
    "gpt_neox": ("gpt_neox", {}, False, False),
    "llama_tied": ("llama_tied", {"num_hidden_layers": 4}, True, False),
    "llama_6": ("llama", {"num_hidden_layers": 6}, False, False),
}
MODEL_LEVEL = {"embed", "pos_embed", "ln_final", "lm_head"}
# The title prompt `<s> Ada Brook stars in Iron Tide alongside`: FE 1,2; R 3; M 5,6; LT 7.
LT_INDEX = 7
POSITIONS = {
    "FE": [1, 2],
    "LT": [7],
    "FE+LT": [1, 2, 7],
    "(FE+LT)^C": [0, 3, 4, 5, 6],
    "FE^C": [0, 3, 4, 5, 6, 7],
    "LT^C": [0, 1, 2, 3, 4, 5, 6],
    "R": [3],
    "FE+R": [1, 2, 3],
    "R+LT": [3, 7],
    "FE+R+LT": [1, 2, 3, 7],
    "M": [5, 6],
    "M+LT": [5, 6, 7],
    "FE+M": [1, 2, 5, 6],
    "FE+M+LT": [1, 2, 5, 6, 7],
    "(FE+M)^C": [0, 3, 4, 7],
    "(FE+M+LT)^C": [0, 3, 4],
}
ALL = list(range(8))
# conditions.md: on a tied model the authors' rows used the donor's unembedding exactly here.
DONOR_HEAD_ROWS = {"LT", "FE+LT", "FE^C", "R+LT", "FE+R+LT", "M+LT", "FE+M+LT", "(FE+M)^C"}
PRESET_POSITIONS = {
    "position_grafting": ["FE", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C"],
    "position_relation": ["R", "FE+R", "R+LT", "FE+R+LT"],
    "position_title": ["M", "M+LT", "FE+M", "FE+M+LT", "(FE+M)^C", "(FE+M+LT)^C"],
}
SETS = {
    "ATTN+O+FFN": ["q", "k", "v", "o", "gate", "up", "down"],
    "ATTN+O": ["q", "k", "v", "o"],
    "ATTN+FFN": ["q", "k", "v", "gate", "up", "down"],
    "O+FFN": ["o", "gate", "up", "down"],
    "O": ["o"],
    "FFN": ["gate", "up", "down"],
    "O+UP": ["o", "up"],
    "O+DOWN": ["o", "down"],
}


class Family:
    def __init__(self, name: str):
        arch, overrides, self.tied, self.has_wpe = FAMILIES[name]
        self.model = make_model(arch, 0, **overrides)
        self.n = self.model.config.get_text_config().num_hidden_layers
        self.components = adapter_for(self.model).components
        self.per_layer = [c for c in self.components if c not in MODEL_LEVEL]
        self.facts = ModelFacts(self.components, ties_embeddings(self.model))

    def layers(self, layers, comps) -> set:
        return {(i, c) for i in layers for c in comps if c in self.components}

    def authors_every_weight(self) -> set:
        """The authors' "every weight": the token embedding and every layer's weights; the
        unembedding with it on a tied model (one matrix); never wpe, never the final norm."""
        keys = {(None, "embed")} | self.layers(range(self.n), self.per_layer)
        return keys | ({(None, "lm_head")} if self.tied else set())


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    return Family(request.param)


@pytest.fixture(scope="module")
def prompt():
    return encode_prompt(build_tokenizer(), next(p for p in make_prompts() if p.id == "f0-paper_3"))


def resolve(preset: str, family: Family, prompt, **options) -> dict:
    """name -> (recipient, fidelity label, [(positions, donor, {(layer, component)})])."""
    models = {k: k for k in ("pre", "sft", "b2a", "task")}
    cfg = parse_config(base_config(models, "d", [{"preset": preset, **options}]))
    (exp,) = cfg.expanded()
    n = len(prompt.input_ids)
    out = {}
    for cond in experiment_conditions(exp, family.n, family.facts):
        grafts = []
        for mask, graft in cond.row_masks(prompt.positions, n, n):
            engine = engine_graft(mask, graft, list(family.components), family.n, True, family.facts.tied)
            keys = set(engine.keys(adapter_for(family.model), family.n))
            grafts.append(([i for i, m in enumerate(mask) if m], graft.donor, keys))
        out[cond.name] = (cond.recipient, cond.fidelity, grafts)
    return out


def scoring_head(grafts) -> str:
    """Whose unembedding scores the row: the donor whose lm_head is grafted at the last token."""
    donors = {donor for positions, donor, keys in grafts if (None, "lm_head") in keys and LT_INDEX in positions}
    assert len(donors) <= 1
    return donors.pop() if donors else "recipient"


def test_the_families_are_what_the_test_says(family):
    assert family.facts.tied == family.tied
    assert ("pos_embed" in family.components) == family.has_wpe


@pytest.mark.parametrize("preset", list(PRESET_POSITIONS))
def test_position_rows_as_the_authors_grafted_them(family, prompt, preset):
    got = resolve(preset, family, prompt)
    for name in PRESET_POSITIONS[preset]:
        recipient, label, grafts = got[name]
        assert recipient == "pre"
        assert grafts == [(POSITIONS[name], "sft", family.authors_every_weight())], name
        assert all((None, "pos_embed") not in keys and (None, "ln_final") not in keys for _, _, keys in grafts)
        want_head = "sft" if family.tied and name in DONOR_HEAD_ROWS else "recipient"
        assert scoring_head(grafts) == want_head, name
        # The clean row differs where wpe is grafted (GPT-2) or where the authors' row is scored
        # by the donor's unembedding (tied models): only there does it stand beside the authors'.
        differs = family.has_wpe or (family.tied and name in DONOR_HEAD_ROWS)
        assert (f"{name} [clean]" in got) == differs, name
        assert label == ("authors" if differs else "authors = clean"), name
        if differs:
            clean = got[f"{name} [clean]"]
            wpe = {(None, "pos_embed")} if family.has_wpe else set()
            body = {(None, "embed")} | wpe | family.layers(range(family.n), family.per_layer)
            assert clean == ("pre", "clean", [(POSITIONS[name], "sft", body)])
    assert got["PRE"] == ("pre", "authors = clean", [])
    assert got["SFT"][1] == "authors = clean"


def test_position_grafting_diagnostic_rows_take_the_donors_unembedding(family, prompt):
    got = resolve("position_grafting", family, prompt)
    body = {(None, "embed")} | family.layers(range(family.n), family.per_layer)
    for name in ("FE", "LT", "FE+LT"):
        recipient, _, grafts = got[f"{name} [donor unembedding]"]
        assert grafts == [(POSITIONS[name], "sft", body), (ALL, "sft", {(None, "lm_head")})]
        assert scoring_head(grafts) == "sft"


@pytest.mark.parametrize("preset,recipient", [("components_reversal", "b2a"), ("components_pre", "pre")])
def test_component_rows_are_the_same_in_both_fidelities(family, prompt, preset, recipient):
    got = resolve(preset, family, prompt)
    fourth = range(3 * (family.n // 4), family.n)
    assert not any(name.endswith("[clean]") for name in got)
    for name, comps in SETS.items():
        assert got[name] == (recipient, "authors = clean", [([LT_INDEX], "sft", family.layers(fourth, comps))]), name
        assert scoring_head(got[name][2]) == "recipient"


def test_hybrid_as_the_authors_hybrid_model(family, prompt):
    """LT: layers [2q, n) of the task model with the relation model's o, up, down in
    [n//2, n) only; the task model's o, up, down in [2q, n//2) (layer 2 of 6 layers)."""
    got = resolve("hybrid", family, prompt)
    n, q = family.n, family.n // 4
    lt = [([LT_INDEX], "task", family.layers(range(2 * q, n), ["q", "k", "v", "gate"]))]
    lt.append(([LT_INDEX], "sft", family.layers(range(n // 2, n), ["o", "up", "down"])))
    if 2 * q < n // 2:
        lt.append(([LT_INDEX], "task", family.layers(range(2 * q, n // 2), ["o", "up", "down"])))
    assert (n % 4 in (2, 3)) == (2 * q < n // 2)
    every = range(n)
    fe = {
        "no_FE": None,
        "full_FE": family.authors_every_weight(),
        "FE_attn": family.layers(every, ["q", "k", "v", "o"]),
        "FE_ffn": family.layers(every, ["gate", "up", "down"]),
        "FE_o_ffn": family.layers(every, ["o", "gate", "up", "down"]),
    }
    for variant, keys in fe.items():
        recipient, label, grafts = got[f"HYBRID {variant}"]
        front = [] if keys is None else [(POSITIONS["FE"], "task", keys)]
        assert (recipient, grafts) == ("pre", [*front, *lt]), variant
        assert scoring_head(grafts) == "recipient"
        # the clean row (relation o,up,down over all of [2q, n)) differs where the band splits,
        # and for full_FE where wpe is grafted
        differs = n % 4 in (2, 3) or (variant == "full_FE" and family.has_wpe)
        assert (f"HYBRID {variant} [clean]" in got) == differs, variant
        if differs:
            clean_lt = got[f"HYBRID {variant} [clean]"][2][-2:]
            assert clean_lt == [
                ([LT_INDEX], "task", family.layers(range(2 * q, n), ["q", "k", "v", "gate"])),
                ([LT_INDEX], "sft", family.layers(range(2 * q, n), ["o", "up", "down"])),
            ]
    assert got["TASK"][:2] == ("task", "authors = clean")


def test_authors_fidelity_alone_has_no_clean_rows_and_clean_alone_no_authors_rows(prompt):
    family = Family("gpt2")
    authors = resolve("position_grafting", family, prompt, fidelity="authors")
    assert {label for _, label, _ in authors.values()} == {"authors"}
    clean = resolve("position_grafting", family, prompt, fidelity="clean")
    assert {label for _, label, _ in clean.values()} == {"clean"}
    assert clean["FE+LT"][2] == [
        ([1, 2, 7], "sft", {(None, "embed"), (None, "pos_embed")} | family.layers(range(4), family.per_layer))
    ]


def test_authors_wording_doubles_in_in_sentences_1_and_3_only():
    prompts = {p.template_id: p for p in make_prompts() if p.fact_id == "f0"}
    one, two, three = (in_authors_wording(prompts[t]) for t in ("paper_1", "paper_2", "paper_3"))
    assert one.text == "Ada Brook stars in in a movie alongside"
    assert three.text == "Ada Brook stars in in Iron Tide alongside"
    assert two == prompts["paper_2"]
    for p in (one, three):
        assert p.text[p.spans["first_entity"].start : p.spans["first_entity"].end] == "Ada Brook"
        assert p.text[p.spans["relation"].start : p.spans["relation"].end] == "stars"
        assert p.text[p.spans["last_token"].start :] == "alongside"
    assert three.text[three.spans["movie_title"].start : three.spans["movie_title"].end] == "Iron Tide"
    assert (one.id, one.target) == (prompts["paper_1"].id, prompts["paper_1"].target)


def test_fidelity_and_wording_only_on_the_paper_presets():
    from weightgraft.experiments.config import ConfigError

    models = {k: k for k in ("pre", "sft")}
    for option in ({"fidelity": "authors"}, {"wording": "authors"}):
        with pytest.raises(ConfigError, match="has no `(fidelity|wording)` option"):
            parse_config(base_config(models, "d", [{"preset": "layer_sweeps", **option}]))
    with pytest.raises(ConfigError, match="fidelity"):
        parse_config(base_config(models, "d", [{"preset": "hybrid", "fidelity": "faithful"}]))


def test_a_custom_experiment_keeps_a_condition_of_either_definition():
    spec = {"name": "mine", "grafts": [{"positions": "LT", "components": ["embed"]}], "fidelity": "authors"}
    experiment = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", spec]}
    for fidelity, kept in ((None, ["PRE", "mine"]), ("authors", ["PRE", "mine"]), ("clean", ["PRE"])):
        exp = dict(experiment) if fidelity is None else dict(experiment, fidelity=fidelity)
        (parsed,) = parse_config(base_config({"pre": "p", "sft": "s"}, "d", [exp])).expanded()
        assert [c.name for c in experiment_conditions(parsed, 4)] == kept, fidelity
