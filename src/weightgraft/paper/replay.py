"""Self-replay: texts the pretrained model writes itself, mixed into finetuning as general text so
that the finetune keeps close to what the model knew (issue 40).

No general text ships with weightgraft, and a user may have none; the model's own continuations of
neutral prompts can always be made offline. Trained on beside the new facts, they pull the
finetune back toward the pretrained model's own distribution (a sampled form of distilling the
model into itself). Sampling at temperature 1 draws from that distribution as it is; each prompt's
continuations come from a generator seeded by the seed and the prompt's index, so that the texts
are the same on every call with the same model, prompts and spec.
"""

from __future__ import annotations

import inspect
import time
import zlib
from dataclasses import asdict, dataclass

import torch

from weightgraft.engine.decoding import cache_argument
from weightgraft.engine.inputs import position_ids
from weightgraft.experiments.models import load_model, load_tokenizer


@dataclass(frozen=True)
class ReplaySpec:
    """How the replay texts are made: `samples` continuations of `new_tokens` tokens per prompt,
    sampled at `temperature` (0: greedy, one continuation per prompt is then enough)."""

    new_tokens: int = 32
    samples: int = 3
    temperature: float = 1.0
    seed: int = 0

    def record(self) -> dict:
        return asdict(self)


def _generator(seed: int, index: int) -> torch.Generator:
    """The generator of prompt `index`: independent of the other prompts and of their order."""
    return torch.Generator().manual_seed(zlib.crc32(f"replay-{seed}-{index}".encode()))


def _next_tokens(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """[rows, 1]: each row's next token, sampled at `temperature` (0: the most likely)."""
    logits = logits.float().cpu()
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


# Prompts decoded together: their rows (`samples` each) go through the model as one left-padded
# batch, one forward per new token. On SmolLM2 on the quiet 2-core machine 32 prompts took 13.8 s
# together against 128 s one prompt at a time, with the same texts (`benchmarks/bench_replay.py`):
# a forward of 3 tokens is mostly overhead.
PROMPTS_PER_BATCH = 32


def continue_prompts(
    model, prompts: list[list[int]], spec: ReplaySpec, generators: list[torch.Generator], device: str
) -> list[list[list[int]]]:
    """For each prompt (token ids), `spec.samples` continuations (the new token ids of each). All
    rows run as one batch, left-padded, with the model's cache; each prompt's rows are sampled
    with its own generator, so that a prompt's samples do not depend on the prompts beside it."""
    rows = spec.samples if spec.temperature else 1
    width = max(len(ids) for ids in prompts)
    padded = [[0] * (width - len(ids)) + ids for ids in prompts for _ in range(rows)]
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts for _ in range(rows)])
    cache = cache_argument(model)  # `cache` or, before transformers renamed it, `past_key_values`
    new: list[torch.Tensor] = []
    with torch.no_grad():
        out, mask, positions = _prefill(model, torch.tensor(padded).to(device), mask.to(device))
        for step in range(spec.new_tokens):
            new.append(_sample(out, generators, rows, spec))
            if step + 1 < spec.new_tokens:  # the last token is sampled, never read
                out, mask, positions = _advance(model, out, new[-1], mask, positions, cache)
    tokens = torch.cat(new, dim=1).tolist()
    return [tokens[i * rows : (i + 1) * rows] for i in range(len(prompts))]


def _prefill(model, ids: torch.Tensor, mask: torch.Tensor):
    """The left-padded prompts through the model with their cache: its output, the mask and each
    row's position ids (counted from its first real token). Only the last position is unembedded:
    on Gemma-3's 262k vocabulary every position's logits of a batch of 96 rows would be over a
    gigabyte."""
    positions = position_ids(mask)
    last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **last)
    return out, mask, positions


def _sample(out, generators, rows: int, spec: ReplaySpec) -> torch.Tensor:
    """[rows, 1]: each row's next token, a prompt's `rows` rows sampled with its generator."""
    logits = out.logits[:, -1].float().cpu()
    return torch.cat(
        [_next_tokens(logits[i * rows : (i + 1) * rows], spec.temperature, g) for i, g in enumerate(generators)]
    )


def _advance(model, out, token: torch.Tensor, mask, positions, cache: str):
    """The forward that reads the sampled tokens through the cache: the model's output, the
    grown mask and the new tokens' positions."""
    mask = torch.cat([mask, mask.new_ones(len(token), 1)], dim=1)
    positions = positions[:, -1:] + 1
    out = model(
        input_ids=token.to(mask.device),
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        **{cache: getattr(out, cache)},
    )
    return out, mask, positions


def _until_end(tokens: list[int], end_ids: set[int]) -> list[int]:
    """A continuation cut before its first end-of-text token (the model ended its text there)."""
    for position, token in enumerate(tokens):
        if token in end_ids:
            return tokens[:position]
    return tokens


def replay_texts(model: str, prompts: list[str] | tuple[str, ...], spec: ReplaySpec, device: str = "cpu") -> list[str]:
    """The pretrained `model`'s own continuations of `prompts` (each prompt with its
    continuation, as one text), `spec.samples` per prompt, in the prompts' order.

    Args:
        model: a model folder, real model name or cached hub id (loaded in float32).
        prompts: openings of sentences to continue (`paper.neutral_prompts`).
        spec: tokens, samples per prompt, temperature and seed.
        device: where the model runs.
    """
    if spec.new_tokens < 1 or spec.samples < 1 or spec.temperature < 0:
        raise ValueError("replay needs new_tokens >= 1, samples >= 1 and temperature >= 0")
    tokenizer = load_tokenizer(model)
    net = load_model(model, device, "float32")
    end_ids = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}
    texts = []
    for first in range(0, len(prompts), PROMPTS_PER_BATCH):
        chunk = list(prompts[first : first + PROMPTS_PER_BATCH])
        ids = [tokenizer(prompt)["input_ids"] for prompt in chunk]
        generators = [_generator(spec.seed, first + i) for i in range(len(chunk))]
        for prompt, prompt_ids, samples in zip(
            chunk, ids, continue_prompts(net, ids, spec, generators, device), strict=True
        ):
            for tokens in samples:
                text = tokenizer.decode(prompt_ids + _until_end(tokens, end_ids), skip_special_tokens=True).strip()
                texts.append(text or prompt)
    return texts


def decoding_seconds(model, device: str, prompts: int, samples: int, steps: int = 6) -> float:
    """Seconds of one decoding step of `prompts` prompts' `samples` rows each, left-padded, as
    `replay_texts` runs it (the same `_sample` and `_advance`): the plan's replay step is that many steps.
    Decoding is many small operations, so its cost is not the batched forward's per token times a
    constant: a constant fitted on one 2-core machine (22 batched tokens) planned 61 s on another
    where it took 219 s."""
    vocab = model.get_input_embeddings().weight.shape[0]
    rows = prompts * samples
    ids = torch.randint(0, vocab, (rows, 8), generator=torch.Generator().manual_seed(2)).to(device)
    mask = torch.ones_like(ids)
    mask[::2, :2] = 0  # half the rows padded, as prompts of unequal length are
    generators = [torch.Generator().manual_seed(3 + i) for i in range(prompts)]
    spec, cache = ReplaySpec(samples=samples), cache_argument(model)
    with torch.no_grad():
        out, mask, positions = _prefill(model, ids, mask)
        for step in range(steps + 1):  # the first decoding step is not timed
            if step == 1:
                start = time.perf_counter()
            token = _sample(out, generators, samples, spec)
            out, mask, positions = _advance(model, out, token, mask, positions, cache)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps
