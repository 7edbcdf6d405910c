"""Test helpers for the experiment layer: tiny Llama models saved as HF folders (on the tiny world
of `tests/support/tiny_world.py`: its prompts, tokenizer, dataset folder and run config) and an
independent reference for grafting.

The reference grafter mixes module outputs position by position with forward hooks, one row at a
time, with no batching, padding or caching: for position-wise modules (linear maps, norms,
embeddings) "the donor's weights at position t" is exactly "the donor module's output at t".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tiny_world import build_tokenizer


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


def build_gpt2_models(root: Path, layers: int = 4, seed: int = 0) -> dict[str, str]:
    """pre and sft: a tiny random GPT-2 (fused c_attn, tied unembedding) on the world's tokenizer,
    and a perturbed copy."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = build_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=layers,
        n_head=4,
        n_positions=64,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(seed)
    pre = GPT2LMHeadModel(config).eval()
    sft = GPT2LMHeadModel(config).eval()
    sft.load_state_dict(pre.state_dict())
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in sft.parameters():
            param.add_(0.5 * param.std().nan_to_num(0.02) * torch.randn(param.shape, generator=gen))
    paths = {}
    for name, model in (("pre", pre), ("sft", sft)):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        paths[name] = str(root / name)
    return paths


def gain_donor(recipient: str, folder: Path) -> str:
    """The recipient with each target's unembedding row pushed along its prompt's last hidden
    state: a donor with a gain for `localize` to find."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiny_world import make_prompts
    from weightgraft.attribution import encode_role_examples

    tokenizer = AutoTokenizer.from_pretrained(recipient)
    model = AutoModelForCausalLM.from_pretrained(recipient).eval()
    with torch.no_grad():
        for example in encode_role_examples(tokenizer, make_prompts()):
            hidden = model.model(input_ids=torch.tensor([example.input_ids])).last_hidden_state[0, -1]
            model.lm_head.weight[example.target_id] += 3.0 * hidden / hidden.norm() ** 2
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


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
