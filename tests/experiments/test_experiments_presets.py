"""Each paper preset, resolved on a tiny model, grafts exactly what conditions.md says.

These are the clean definitions (`fidelity: clean`); the authors' are checked per architecture
in test_experiments_fidelity.py. The model has 6 layers, where the authors' bands and the engine's differ: q = 6 // 4 = 1, so the
authors' fourth quarter is layers 3..5 (the engine's last_quarter would be 4..5) and their third
and fourth quarters are 2..5. Grafts are checked as the engine resolves them: the set of
(layer, component) keys, the token positions on the title prompt, and the donor.
"""

from __future__ import annotations

import pytest
import torch

from tiny_world import base_config, build_tokenizer, make_prompts
from weightgraft.data.encode import encode_prompt
from weightgraft.experiments import preset_registry
from weightgraft.experiments.config import ConfigError, parse_config
from weightgraft.experiments.methods import engine_graft
from weightgraft.experiments.plan.selection import experiment_conditions
from weightgraft.experiments.preset_registry import Preset, preset_names, presets_taking, register_preset
from weightgraft.paper.presets import PAPER_PRESETS as PAPERS_OWN
from weightgraft.paper.presets import PRESET_NAMES, PRESETS

N = 6
FOURTH = [3, 4, 5]
THIRD_FOURTH = [2, 3, 4, 5]
PER_LAYER = ["q", "k", "v", "o", "gate", "up", "down", "ln1", "ln2"]  # a Llama layer
WEIGHTS = {(None, "embed")} | {(i, c) for i in range(N) for c in PER_LAYER}
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
# Title prompt `<s> Ada Brook stars in Iron Tide alongside`: FE 1,2; R 3; M 5,6; LT 7.
FE, R, M, LT, ALL = [1, 2], [3], [5, 6], [7], list(range(8))


@pytest.fixture(scope="module")
def grafter():
    from transformers import LlamaConfig, LlamaForCausalLM

    from weightgraft import Grafter

    config = LlamaConfig(
        vocab_size=len(build_tokenizer()),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=N,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return Grafter(LlamaForCausalLM(config), LlamaForCausalLM(config))


@pytest.fixture(scope="module")
def prompt():
    p = next(p for p in make_prompts() if p.id == "f0-paper_3")
    return encode_prompt(build_tokenizer(), p)


def resolve(preset: str, grafter, prompt, **options) -> dict:
    """condition -> recipient, and its grafts as (positions, donor, {(layer, component)})."""
    if preset in PAPER_PRESETS:
        options.setdefault("fidelity", "clean")
    models = {k: k for k in ("pre", "sft", "b2a", "task", "freetext")}
    cfg = parse_config(
        base_config(models, "d", [{"preset": preset, **options}])
        | {"datasets": {k: "d" for k in ("relation", "known", "freetext")}}
    )
    (exp,) = cfg.expanded()
    n = len(prompt.input_ids)
    out = {}
    for cond in experiment_conditions(exp, N):
        grafts = []
        for mask, graft in cond.row_masks(prompt.positions, n, n):
            engine = engine_graft(mask, graft, grafter.components, N, name_donor=False)
            keys = set(engine.keys(grafter.adapter, N))
            grafts.append(([i for i, m in enumerate(mask) if m], graft.donor, keys))
        out[cond.name] = (cond.recipient, grafts)
    return exp, out


def layer_keys(layers, comps):
    return {(i, c) for i in layers for c in comps}


def test_position_grafting_every_weight_at_positions_and_the_recipients_head(grafter, prompt):
    exp, got = resolve("position_grafting", grafter, prompt)
    assert exp.templates == ["paper_1", "paper_2", "paper_3"]
    assert got["PRE"] == ("pre", [])
    everything = {k for k in grafter.keys}  # the donor model itself, head included
    assert got["SFT"] == ("pre", [(ALL, "sft", everything)])
    expected = {
        "FE": FE,
        "LT": LT,
        "FE+LT": FE + LT,
        "(FE+LT)^C": [0, 3, 4, 5, 6],
        "FE^C": [0, 3, 4, 5, 6, 7],
        "LT^C": [0, 1, 2, 3, 4, 5, 6],
    }
    for name, positions in expected.items():
        assert got[name] == ("pre", [(positions, "sft", WEIGHTS)]), name
        assert (None, "lm_head") not in got[name][1][0][2]
        assert (None, "ln_final") not in got[name][1][0][2]
    for name in ("FE", "LT", "FE+LT"):  # the report shows both unembeddings
        assert got[f"{name} [donor unembedding]"] == (
            "pre",
            [(expected[name], "sft", WEIGHTS), (ALL, "sft", {(None, "lm_head")})],
        )


def test_position_grafting_with_the_donors_unembedding(grafter, prompt):
    _, got = resolve("position_grafting", grafter, prompt, unembedding="donor")
    assert got["FE+LT"] == ("pre", [(FE + LT, "sft", WEIGHTS), (ALL, "sft", {(None, "lm_head")})])
    assert got["FE+LT [recipient unembedding]"] == ("pre", [(FE + LT, "sft", WEIGHTS)])


def test_relation_conditions_take_the_relation_word_never_lt(grafter, prompt):
    exp, got = resolve("position_relation", grafter, prompt)
    assert list(got) == ["PRE", "SFT", "R", "FE+R", "R+LT", "FE+R+LT"]
    for name, positions in {"R": R, "FE+R": FE + R, "R+LT": R + LT, "FE+R+LT": FE + R + LT}.items():
        assert got[name] == ("pre", [(positions, "sft", WEIGHTS)]), name


def test_title_conditions_on_sentence_3_with_their_complements(grafter, prompt):
    exp, got = resolve("position_title", grafter, prompt)
    assert exp.templates == ["paper_3"]
    expected = {
        "M": M,
        "M+LT": M + LT,
        "FE+M": FE + M,
        "FE+M+LT": FE + M + LT,
        "(FE+M)^C": [0, 3, 4, 7],
        "(FE+M+LT)^C": [0, 3, 4],
    }
    assert list(got) == ["PRE", "SFT", *expected]
    for name, positions in expected.items():
        assert got[name] == ("pre", [(positions, "sft", WEIGHTS)]), name


@pytest.mark.parametrize(
    "preset,recipient,baseline", [("components_reversal", "b2a", "B2A"), ("components_pre", "pre", "PRE")]
)
def test_components_graft_nothing_at_fe_and_the_sets_at_lt_in_the_authors_fourth_quarter(
    grafter, prompt, preset, recipient, baseline
):
    _, got = resolve(preset, grafter, prompt)
    assert list(got) == [baseline, "SFT", *SETS]
    assert got[baseline] == (recipient, [])
    assert got["SFT"][0] == recipient and got["SFT"][1][0][1] == "sft"
    for name, comps in SETS.items():
        assert got[name] == (recipient, [(LT, "sft", layer_keys(FOURTH, comps))]), name
    assert got["O+FFN"][1][0][2] == layer_keys(range(3, 6), ["o", "gate", "up", "down"])


def test_hybrid_five_fe_variants_from_task_and_the_two_donor_lt_mix(grafter, prompt):
    _, got = resolve("hybrid", grafter, prompt)
    lt = [
        (LT, "task", layer_keys(THIRD_FOURTH, ["q", "k", "v", "gate"])),
        (LT, "sft", layer_keys(THIRD_FOURTH, ["o", "up", "down"])),
    ]
    everywhere = range(N)
    fe = {
        "no_FE": None,
        "full_FE": WEIGHTS,
        "FE_attn": layer_keys(everywhere, ["q", "k", "v", "o"]),
        "FE_ffn": layer_keys(everywhere, ["gate", "up", "down"]),
        "FE_o_ffn": layer_keys(everywhere, ["o", "gate", "up", "down"]),
    }
    assert list(got) == ["PRE", "SFT", "TASK", *(f"HYBRID {v}" for v in fe)]
    assert got["TASK"] == ("task", [])
    for variant, keys in fe.items():
        front = [] if keys is None else [(FE, "task", keys)]
        assert got[f"HYBRID {variant}"] == ("pre", [*front, *lt]), variant


def test_known_facts_compares_pre_and_sft_on_the_known_dataset(grafter, prompt):
    exp, got = resolve("known_facts", grafter, prompt)
    assert exp.dataset == "known" and list(got) == ["PRE", "SFT"]
    assert got["PRE"] == ("pre", []) and got["SFT"][1][0][:2] == (ALL, "sft")


PAPER_PRESETS = [
    "position_grafting",
    "position_relation",
    "position_title",
    "components_reversal",
    "components_pre",
    "hybrid",
]


@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_paper_presets_score_the_forward_direction_only(preset, grafter, prompt):
    """The paper asks the first actor for the second; reversed prompts are what the B2A
    recipient was trained on, so pooling them would lift its baseline."""
    exp, _ = resolve(preset, grafter, prompt)
    assert exp.directions == "forward"


def test_directions_select_prompts_by_their_order():
    from weightgraft.experiments.plan.selection import select_examples

    forward = make_prompts()
    backward = [p.model_copy(update={"id": p.id + "-r", "reversed": True}) for p in forward]
    mixed = forward + backward
    picked = {d: select_examples(mixed, None, None, 0, "test", d) for d in ("forward", "reversed", "both")}
    assert [p.id for p in picked["forward"]] == [p.id for p in forward]
    assert [p.id for p in picked["reversed"]] == [p.id for p in backward]
    assert len(picked["both"]) == len(mixed)
    capped = select_examples(mixed, None, 5, 0, "test", "forward")
    assert len(capped) == 5 and not any(p.reversed for p in capped)


def test_the_paper_registers_each_preset_with_the_options_it_takes():
    """Importing weightgraft.paper.presets puts its ten presets in the registry, in their order,
    and the options each takes are those the run config lets an entry carry."""
    assert [name for name in preset_names() if name in PRESET_NAMES] == list(PRESET_NAMES) == [p.name for p in PRESETS]
    assert list(PAPERS_OWN) == PAPER_PRESETS
    assert presets_taking("fidelity") == presets_taking("wording") == PAPER_PRESETS
    assert sorted(presets_taking("unembedding")) == [
        "free_text",
        "position_grafting",
        "position_relation",
        "position_title",
    ]


def _mine(max_examples=None, templates=None, unembedding="recipient") -> list[dict]:
    return [
        dict(
            name="mine",
            dataset="relation",
            recipient="pre",
            donor="sft",
            conditions=["PRE", "FE+LT"],
            unembedding=unembedding,
            max_examples=max_examples,
            templates=templates,
        )
    ]


def test_a_preset_of_ones_own_runs_in_a_config_and_a_taken_name_is_refused(monkeypatch):
    monkeypatch.setattr(preset_registry, "_REGISTRY", dict(preset_registry._REGISTRY))  # gone after the test
    register_preset(Preset("mine", _mine, frozenset({"unembedding"})))
    models = {"pre": "gpt2", "sft": "gpt2"}
    cfg = parse_config(base_config(models, "d", [{"preset": "mine", "unembedding": "donor", "max_examples": 3}]))
    (exp,) = cfg.expanded()
    assert (exp.name, exp.unembedding, exp.max_examples, exp.conditions) == ("mine", "donor", 3, ["PRE", "FE+LT"])
    with pytest.raises(ConfigError, match="preset 'mine' has no `fidelity` option"):
        parse_config(base_config(models, "d", [{"preset": "mine", "fidelity": "clean"}]))
    with pytest.raises(ConfigError, match="Input should be 'position_grafting', .* or 'mine'"):
        parse_config(base_config(models, "d", [{"preset": "yours"}]))
    register_preset(Preset("mine", _mine, frozenset({"unembedding"})))  # the same again: harmless
    with pytest.raises(ValueError, match="a preset named 'position_grafting' is already registered"):
        register_preset(Preset("position_grafting", _mine))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\]"):
        Preset("tinted", _mine, frozenset({"colour"}))


def test_a_config_loaded_before_the_paper_names_the_fix():
    """The run config knows no preset of its own: in a fresh interpreter that never imported the
    paper, a preset is unknown and the error says how to register the paper's."""
    import subprocess
    import sys

    code = (
        "from weightgraft.experiments.config import ConfigError, parse_config\n"
        "try:\n"
        "    parse_config({'models': {'pre': 'gpt2'}, 'datasets': {'relation': 'd'},"
        " 'experiments': [{'preset': 'position_grafting'}]})\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (
        "invalid run config: experiments.0: no presets are registered, so 'position_grafting' is unknown; "
        "import weightgraft.paper.presets (the paper's presets) or register your own with register_preset"
    )
