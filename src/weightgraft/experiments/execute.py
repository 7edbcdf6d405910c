"""Execution: models loaded once per run, prompts encoded, and rows scored in batches.

Rows of one forward pass are (example, condition) pairs of conditions that share recipient,
donors and method. Batches are fixed: the runner's chunks of conditions are fixed, and the
examples are cut into batches once per experiment (`example_batches`, from all its examples),
which shards take whole. Every forward therefore holds the same rows in every run, and the
engine's prefix sharing (which splits rows by what the whole batch has in common) computes each
row the same way: a resumed or sharded run equals an uninterrupted one bit for bit, and sweeps
get sharing's speed-up. Each batch's rows are aligned on the prompt's last token (`align_on`),
where the paper's conditions part ways, so one segment holds every prompt's prefix. Weight
grafting goes through the engine's `row_grafts`, activation patching through
`patching.patched_logits`, and both end in the same per-example scores.
"""

from __future__ import annotations

import torch

from weightgraft.data.batching import align_on, right_pad
from weightgraft.data.errors import DataError
from weightgraft.errors import UserError
from weightgraft.experiments.components import resolve_for_model
from weightgraft.experiments.conditions import Condition, ResolvedGraft
from weightgraft.experiments.config import ExperimentSpec, RunConfig
from weightgraft.experiments.metrics import score_rows
from weightgraft.experiments.models import (
    fingerprint_model,
    load_model,
    load_tokenizer,
    model_dir,
    model_file_hashes,
    vocab_fingerprint,
)
from weightgraft.experiments.patching import patched_logits
from weightgraft.experiments.plan import engine_layers, layer_indices, select_examples, ties_embeddings
from weightgraft.experiments.records import Example, na_record, scored_record
from weightgraft.experiments.roles import NotApplicable


class Resources:
    """The models, tokenizer, grafters and prompts of one run, each loaded once."""

    def __init__(self, config: RunConfig):
        self.config = config
        self._models: dict[str, torch.nn.Module] = {}
        self._fingerprints: dict[str, str] = {}
        self._grafters: dict[tuple, object] = {}
        self._tokenizer = None
        self._prompts: dict[str, list] = {}
        self.share_prefixes = True  # False: every row in full (benchmarks compare the two)

    def model(self, key: str):
        if key not in self._models:
            self._models[key] = load_model(
                self.config.models[key],
                self.config.device,
                self.config.dtype,
                self.config.trust_remote_code,
                field=f"models.{key}",
            )
        return self._models[key]

    def fingerprint(self, key: str) -> str:
        if key not in self._fingerprints:
            self._fingerprints[key] = fingerprint_model(self.config.models[key])
        return self._fingerprints[key]

    def model_info(self, key: str) -> dict:
        path = self.config.models[key]
        return {
            "path": path,
            "resolved": str(model_dir(path) or ""),
            "sha256": self.fingerprint(key),
            "files": model_file_hashes(path),
        }  # each file's own sha256

    def tokenizer(self, keys: list[str]):
        """One tokenizer for the run; every model must share its vocabulary."""
        if self._tokenizer is None:
            seen = {}
            for key in keys:
                path = self.config.models[key]
                if path in seen:
                    continue
                seen[path] = load_tokenizer(path, self.config.trust_remote_code, f"models.{key}")
            first_path, first = next(iter(seen.items()))
            reference = vocab_fingerprint(first)
            for path, tok in seen.items():
                if vocab_fingerprint(tok) != reference:
                    raise UserError(
                        f"models {first_path!r} and {path!r} have different "
                        "tokenizers; grafting needs one shared vocabulary, so use "
                        "finetunes of one base model"
                    )
            self._tokenizer = first
        return self._tokenizer

    def grafter(self, recipient: str, donors: tuple[str, ...]):
        """A Grafter of `recipient` with the named donors (one donor: the single-donor form)."""
        from weightgraft.engine.grafter import Grafter

        key = (recipient, donors)
        if key not in self._grafters:
            allow = self.config.allow_config_differences
            try:
                if len(donors) == 1:
                    grafter = Grafter(self.model(recipient), self.model(donors[0]), allow_config_differences=allow)
                else:
                    models = {k: self.model(k) for k in donors}
                    grafter = Grafter(self.model(recipient), donors=models, allow_config_differences=allow)
            except ValueError as err:  # the engine's word on models that do not fit together
                raise UserError(f"models.{recipient} and models.{'/'.join(donors)} cannot be grafted: {err}") from err
            # Prefix sharing stays on: batches are fixed (see the module's docstring), so how
            # it splits a row does not depend on what is pending or on the shard.
            grafter.share_prefixes = self.share_prefixes
            self._grafters[key] = grafter
        return self._grafters[key]

    def prompts(self, dataset: str) -> list:
        from weightgraft.data.io import load_eval_prompts

        if dataset not in self._prompts:
            self._prompts[dataset] = list(load_eval_prompts(self.config.datasets[dataset]))
        return self._prompts[dataset]


def encode_examples(resources: Resources, exp: ExperimentSpec, tokenizer) -> tuple[list[Example], int]:
    """The experiment's examples, encoded, and how many prompts it could have scored."""
    from weightgraft.data.encode import check_context, encode_prompt
    from weightgraft.data.templates import in_authors_wording
    from weightgraft.experiments.models import context_length

    every = resources.prompts(exp.dataset)
    if exp.wording == "authors":
        every = [in_authors_wording(p) for p in every]
    available = select_examples(
        every, exp.templates, None, resources.config.seed, f"experiment {exp.name!r}", exp.directions
    )
    prompts = select_examples(
        every, exp.templates, exp.max_examples, resources.config.seed, f"experiment {exp.name!r}", exp.directions
    )
    examples = []
    for prompt in prompts:
        enc = encode_prompt(tokenizer, prompt)
        if not enc.target_ids:
            raise DataError(
                f"prompt {prompt.id!r}: target {prompt.target!r} has no tokens; rebuild the dataset "
                "(every prompt needs a non-empty target)"
            )
        positions = {str(k): list(v) for k, v in enc.positions.items()}
        examples.append(Example(prompt, list(enc.input_ids), list(enc.target_ids), positions))
    check_context(
        {e.prompt.id: len(e.input_ids) + len(e.target_ids) for e in examples},
        context_length(resources.config.models[exp.recipient]),
        f"experiment {exp.name!r} (models.{exp.recipient})",
    )
    return examples, len(available)


def example_batches(
    resources: Resources, recipient: str, examples: list[Example], rows_per_example: int
) -> list[list[Example]]:
    """The experiment's examples cut into the batches every chunk runs (at most
    `rows_per_example` conditions each): similar prompts side by side, so that lengths line up
    and padding is short. A function of all the examples and the config alone, so that a
    resumed run and every shard form the same batches."""
    if not examples:
        return []
    # the width of rows aligned on the prompt's last token (see compute_chunk)
    longest = max(len(e.input_ids) - 1 for e in examples) + max(len(e.target_ids) for e in examples)
    # Tokens per forward: the config's cap, and at most ~1 GiB of float32 logits.
    vocab = resources.model(recipient).config.get_text_config().vocab_size
    budget = min(resources.config.max_batch_tokens, 2**28 // vocab)
    per_batch = max(1, budget // (longest * rows_per_example))
    ordered = sorted(examples, key=lambda e: (e.prompt.template_id, len(e.input_ids)))
    return [ordered[i : i + per_batch] for i in range(0, len(ordered), per_batch)]


def compute_chunk(
    resources: Resources, exp: ExperimentSpec, chunk: list[Condition], batches: list[list[Example]], tokenizer, bar
) -> dict[str, list[dict]]:
    """Per-example records for every condition of the chunk (same recipient/donors/method),
    in the order of the batches' examples."""
    config = resources.config
    recipient, donor, method = chunk[0].recipient, chunk[0].donor, chunk[0].method
    donors = chunk[0].donors
    records: dict[str, list[dict]] = {c.name: [] for c in chunk}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = config.device
    if method == "weights":
        grafter = resources.grafter(recipient, donors)
        available = list(grafter.components)
        num_layers = grafter.num_layers
        tied = ties_embeddings(resources.model(recipient))
    else:
        from weightgraft.adapters import adapter_for

        rec_model, don_model = resources.model(recipient), resources.model(donor)
        layers_of = adapter_for(rec_model).decoder_layers
        num_layers = len(layers_of(rec_model))
    for batch in batches:
        rows, masks = [], []  # rows: (example index in batch, condition)
        for ei, ex in enumerate(batch):
            total_len = len(ex.input_ids) + len(ex.target_ids) - 1
            for cond in chunk:
                try:
                    row_masks = cond.row_masks(ex.positions, len(ex.input_ids), total_len)
                except NotApplicable as err:
                    records[cond.name].append(na_record(exp.name, cond.name, ex, str(err)))
                    continue
                rows.append((ei, cond))
                masks.append(row_masks)
        if rows:
            seqs = [batch[ei].input_ids + batch[ei].target_ids[:-1] for ei, _ in rows]
            if method == "weights":
                row_grafts = [
                    [engine_graft(m, g, available, num_layers, len(donors) > 1, tied) for m, g in row_masks] or None
                    for row_masks in masks
                ]
                # Aligned on the prompt's last token: its prefix shares one segment, and only the
                # scored columns (that token and the target's) reach the unembedding.
                ids, attn, column = align_on(seqs, [len(batch[ei].input_ids) - 1 for ei, _ in rows], pad)
                ids, attn = ids.to(device), attn.to(device)
                logits = grafter.logits(
                    ids, row_grafts=row_grafts, attention_mask=attn, logits_to_keep=ids.shape[1] - column
                )
                first_steps = [0] * len(rows)
            else:
                ex_seqs = [ex.input_ids + ex.target_ids[:-1] for ex in batch]
                ex_ids, ex_attn = _pad(ex_seqs, pad, device)
                patch = torch.zeros(len(rows), num_layers, ex_ids.shape[1], dtype=torch.bool, device=device)
                for r, row_masks in enumerate(masks):
                    for m, graft in row_masks:
                        patch[r, layer_indices(graft.layers, num_layers), : len(m)] |= torch.tensor(m, device=device)
                row_example = torch.tensor([ei for ei, _ in rows], device=device)
                logits = patched_logits(rec_model, don_model, layers_of, ex_ids, ex_attn, row_example, patch)
                first_steps = [len(batch[ei].input_ids) - 1 for ei, _ in rows]  # right-padded rows
            scores = score_rows(logits, first_steps, [batch[ei].target_ids for ei, _ in rows])
            for (ei, cond), score in zip(rows, scores):
                predicted = tokenizer.decode([score["predicted_id"]])
                records[cond.name].append(scored_record(exp.name, cond.name, batch[ei], score, predicted))
        bar.update(len(batch) * len(chunk))
    return records


def engine_graft(
    mask: list[bool], graft: ResolvedGraft, available: list[str], num_layers: int, name_donor: bool, tied: bool = False
):
    """The engine's Graft for one row: concrete positions, layers and components (`tied`: the
    recipient's unembedding is its token embedding, which the authors' every-weight graft
    swaps together); the donor is named only when the Grafter holds several (a one-donor
    Grafter takes Grafts without one)."""
    from weightgraft.engine.graft import Graft

    kwargs = {"donor": graft.donor} if name_donor else {}
    return Graft(
        positions=mask,
        layers=engine_layers(graft.layers, num_layers),
        components=resolve_for_model(graft.components, available, tied),
        **kwargs,
    )


def _pad(seqs: list[list[int]], pad: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = right_pad(seqs, pad)
    return ids.to(device), mask.to(device)
