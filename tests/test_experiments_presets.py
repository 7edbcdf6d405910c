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
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.methods import engine_graft
from weightgraft.experiments.plan import experiment_conditions

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
    from weightgraft.experiments.plan import select_examples

    forward = make_prompts()
    backward = [p.model_copy(update={"id": p.id + "-r", "reversed": True}) for p in forward]
    mixed = forward + backward
    picked = {d: select_examples(mixed, None, None, 0, "test", d) for d in ("forward", "reversed", "both")}
    assert [p.id for p in picked["forward"]] == [p.id for p in forward]
    assert [p.id for p in picked["reversed"]] == [p.id for p in backward]
    assert len(picked["both"]) == len(mixed)
    capped = select_examples(mixed, None, 5, 0, "test", "forward")
    assert len(capped) == 5 and not any(p.reversed for p in capped)
