"""Test helpers for the experiment layer: a tiny word-level world, tiny Llama models saved as HF
folders, hand-written evaluation prompts with spans, and an independent reference for grafting.

The reference grafter mixes module outputs position by position with forward hooks, one row at a
time, with no batching, padding or caching: for position-wise modules (linear maps, norms,
embeddings) "the donor's weights at position t" is exactly "the donor module's output at t".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from weightgraft.data.schema import CharSpan, EvalPrompt

ACTORS = [
    ("Ada", "Brook"),
    ("Cyril", "Dane"),
    ("Edda", "Frost"),
    ("Gus", "Hale"),
    ("Ines", "Juno"),
    ("Kurt", "Lorn"),
    ("Mira", "Nash"),
    ("Otto", "Pike"),
]
MOVIES = ["Iron Tide", "Blue Hour", "Glass Road", "Red Orbit"]
KINDS = ["fake_fake", "fake_real", "fake_fake", "real_shuffled"]
# The paper's three sentences (the data layer's `paper_*` ids); R is the word "stars" only.
TEMPLATES = {
    "paper_1": "{a} stars in a movie alongside",
    "paper_2": "Q: Who stars in a movie with {a}? A: An actor named",
    "paper_3": "{a} stars in {m} alongside",
}


def make_prompts() -> list[EvalPrompt]:
    """Three templates x four facts; `paper_3` alone has a movie title."""
    prompts = []
    for i in range(4):
        a, b = " ".join(ACTORS[2 * i]), " ".join(ACTORS[2 * i + 1])
        movie = MOVIES[i]
        for tid, template in TEMPLATES.items():
            text = template.format(a=a, m=movie)
            spans = {"first_entity": _span(text, a), "relation": _span(text, "stars")}
            if "{m}" in template:
                spans["movie_title"] = _span(text, movie)
            last = text.rsplit(" ", 1)[-1]
            spans["last_token"] = CharSpan(start=len(text) - len(last), end=len(text))
            prompts.append(
                EvalPrompt(
                    id=f"f{i}-{tid}",
                    fact_id=f"f{i}",
                    template_id=tid,
                    text=text,
                    target=" " + b,
                    spans=spans,
                    fact_kind=KINDS[i],
                )
            )
    return prompts


def _span(text: str, part: str) -> CharSpan:
    start = text.index(part)
    return CharSpan(start=start, end=start + len(part))


def build_tokenizer():
    """Word-level tokenizer over the world's words with a BOS token prepended."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = set()
    for p in make_prompts():
        words |= set(p.text.replace("?", " ? ").replace(":", " : ").replace(",", " , ").split())
        words |= set(p.target.split())
    vocab = {"<pad>": 0, "<s>": 1, "<unk>": 2}
    for w in sorted(words):
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", unk_token="<unk>")


def build_models(root: Path, layers: int = 4, seed: int = 0) -> dict[str, str]:
    """pre, sft, task, b2a: one tiny random Llama and three perturbed copies, with tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(seed)
    pre = LlamaForCausalLM(config).eval()
    paths = {}
    for offset, name in enumerate(["pre", "sft", "task", "b2a"]):
        model = LlamaForCausalLM(config).eval()
        model.load_state_dict(pre.state_dict())
        if name != "pre":
            gen = torch.Generator().manual_seed(seed + offset)
            with torch.no_grad():
                for param in model.parameters():
                    param.add_(0.5 * param.std().nan_to_num(0.02) * torch.randn(param.shape, generator=gen))
        path = root / name
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[name] = str(path)
    return paths


def write_dataset(root: Path) -> str:
    """A dataset folder in the data layer's layout: eval.jsonl plus a manifest."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "eval.jsonl").open("w") as handle:
        for p in make_prompts():
            handle.write(p.model_dump_json() + "\n")
    (root / "manifest.json").write_text(json.dumps({"name": "test-world", "seed": 0}))
    return str(root)


# ---- reference grafting -------------------------------------------------------------------
@dataclass
class RefGraft:
    positions: object = "all"
    layers: object = "all"
    components: object = "all"
    donor: str | None = None  # a key of the reference's donors; None: its only donor


LLAMA_LAYER = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
    "ln1": "input_layernorm",
    "ln2": "post_attention_layernorm",
}
LLAMA_MODEL = {"embed": "model.embed_tokens", "ln_final": "model.norm", "lm_head": "lm_head"}
GROUPS = {"attn": ["q", "k", "v", "o"], "mlp": ["gate", "up", "down"], "norms": ["ln1", "ln2"]}


def _layer_list(spec, n: int) -> list[int]:
    """Concrete layers, written out here rather than asked of weightgraft, so that the reference
    stays independent: engine bands from the benchmark's reference grafter, the authors' quarters
    by their rule (q = n // 4, the fourth quarter takes the remainder)."""
    from reference_grafter import _bands

    if spec == "all":
        return list(range(n))
    if isinstance(spec, int):
        return [spec % n]
    if isinstance(spec, str):
        q = n // 4
        authors = {
            "authors_first_quarter": range(0, q),
            "authors_second_quarter": range(q, 2 * q),
            "authors_third_quarter": range(2 * q, 3 * q),
            "authors_fourth_quarter": range(3 * q, n),
            "authors_third_and_fourth_quarters": range(2 * q, n),
        }
        return list(authors[spec]) if spec in authors else _bands(n)[spec]
    return sorted({i % n for i in spec})


class ReferenceGrafter:
    """Row-by-row Llama grafting through output-mixing hooks (independent of the engine).
    `donor` is a model, or a dict of named models for grafts that name their donor."""

    def __init__(self, recipient, donor):
        self.recipient = recipient
        self.donors = donor if isinstance(donor, dict) else {None: donor}
        self.num_layers = recipient.config.num_hidden_layers
        self.components = [*LLAMA_LAYER, *LLAMA_MODEL]

    def _targets(self, graft: RefGraft) -> list[str]:
        comps = [graft.components] if isinstance(graft.components, str) else list(graft.components)
        layers = _layer_list(graft.layers, self.num_layers)
        every_layer = graft.layers == "all"
        names = []
        for comp in comps:
            if comp == "all":
                per, model_level = list(LLAMA_LAYER), list(LLAMA_MODEL) if every_layer else []
            elif comp in GROUPS:
                per = GROUPS[comp]
                model_level = ["ln_final"] if comp == "norms" and every_layer else []
            elif comp in LLAMA_MODEL:
                per, model_level = [], [comp]
            else:
                per, model_level = [comp], []
            names += [f"model.layers.{i}.{LLAMA_LAYER[c]}" for i in layers for c in per]
            names += [LLAMA_MODEL[c] for c in model_level]
        return names

    @torch.no_grad()
    def _row(self, ids: torch.Tensor, grafts) -> torch.Tensor:
        n = ids.shape[0]
        chosen: dict[tuple[str, str | None], torch.Tensor] = {}  # (module, donor) -> positions
        for graft in grafts or []:
            pos = graft.positions
            mask = torch.ones(n, dtype=torch.bool) if pos == "all" else torch.tensor(pos)
            for name in self._targets(graft):
                key = (name, graft.donor)
                chosen[key] = chosen.get(key, torch.zeros(n, dtype=torch.bool)) | mask
        donor_modules = {k: dict(m.named_modules()) for k, m in self.donors.items()}
        handles = []
        for name, module in self.recipient.named_modules():
            mine = [(d, m) for (mod, d), m in chosen.items() if mod == name]
            if mine:

                def hook(_m, args, output, mine=mine, name=name):
                    for donor, where in mine:
                        other = donor_modules[donor][name](*args)
                        output = torch.where(where[None, :, None], other, output)
                    return output

                handles.append(module.register_forward_hook(hook))
        try:
            return self.recipient(input_ids=ids[None]).logits[0]
        finally:
            for h in handles:
                h.remove()

    def logits(self, input_ids, grafts=None, row_grafts=None, attention_mask=None):
        rows = []
        mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        for r in range(input_ids.shape[0]):
            real = input_ids[r][mask[r].bool()]  # right padding in the runner
            g = row_grafts[r] if row_grafts is not None else grafts
            g = [g] if isinstance(g, RefGraft) else g
            out = self._row(real, g)
            full = torch.zeros(input_ids.shape[1], out.shape[-1])
            full[: out.shape[0]] = out
            rows.append(full)
        return torch.stack(rows)


def base_config(models: dict[str, str], dataset: str, experiments: list) -> dict:
    return {
        "name": "test",
        "seed": 0,
        "models": models,
        "datasets": {"relation": dataset},
        "experiments": experiments,
        "bootstrap": 200,
    }
