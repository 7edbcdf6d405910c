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

import time
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch

from weightgraft.engine.decoding import cache_argument
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


def continue_prompt(
    model, ids: list[int], spec: ReplaySpec, generator: torch.Generator, device: str
) -> list[list[int]]:
    """`spec.samples` continuations of the prompt `ids` (the new token ids of each), every row of
    one batch extended by one token per forward, with the model's cache."""
    rows = spec.samples if spec.temperature else 1
    batch = torch.tensor([ids] * rows, device=device)
    new: list[torch.Tensor] = []
    cache = cache_argument(model)  # `cache` or, before transformers renamed it, `past_key_values`
    with torch.no_grad():
        out = model(input_ids=batch, use_cache=True)
        for _ in range(spec.new_tokens):
            token = _next_tokens(out.logits[:, -1], spec.temperature, generator)
            new.append(token)
            out = model(input_ids=token.to(device), use_cache=True, **{cache: getattr(out, cache)})
    return torch.cat(new, dim=1).tolist()


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
    with _one_thread(device):
        for index, prompt in enumerate(prompts):
            ids = tokenizer(prompt)["input_ids"]
            for tokens in continue_prompt(net, ids, spec, _generator(spec.seed, index), device):
                text = tokenizer.decode(ids + _until_end(tokens, end_ids), skip_special_tokens=True).strip()
                texts.append(text or prompt)
    return texts


def decoding_seconds(model, device: str, rows: int, steps: int = 6) -> float:
    """Seconds of one cached decoding forward of `rows` rows, as `replay_texts` runs it (one
    thread on a CPU): the plan's replay step is that many forwards. Decoding is many small
    operations, so its cost is not the batched forward's per token times a constant: a constant
    fitted on one 2-core machine (22 batched tokens) planned 61 s on another where it took 219 s."""
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (rows, 8), generator=torch.Generator().manual_seed(2)).to(device)
    cache, generator = cache_argument(model), torch.Generator().manual_seed(3)
    with _one_thread(device), torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        for step in range(steps + 1):  # the first decoding forward is not timed
            if step == 1:
                start = time.perf_counter()
            token = _next_tokens(out.logits[:, -1], 1.0, generator).to(device)
            out = model(input_ids=token, use_cache=True, **{cache: getattr(out, cache)})
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / steps


@contextmanager
def _one_thread(device: str):
    """Decoding on a CPU in one thread (restored after): a forward of 3 tokens is many small
    operations, and on SmolLM2 on the shared 2-core machine it took 0.10 s in one thread against
    1.16 s in two (the threads wait on each other at every operation)."""
    before = torch.get_num_threads()
    if not device.startswith("cpu"):
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
