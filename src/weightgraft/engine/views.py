"""The researcher's views of a grafted pass, as `Grafter` methods: scores by the runner's rule
(`score`), transformers' own output (`run`), activations by name (`cache`), the logit lens
(`lens`) and the graft installed on the recipient for the user's own code (`applied`).

`Grafter` inherits them (the engine's pass stays in `grafter.py`); each is a thin door onto the
module that does the work: `scoring`, `activations`, `applied`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

import torch

from weightgraft.engine import activations, applied, scoring
from weightgraft.engine.graft import Graft
from weightgraft.engine.inputs import CallInputs, RolePrompt

Grafts = Graft | Sequence[Graft] | None


class GrafterViews:
    """Methods of `Grafter` that read more of a grafted pass than its logits."""

    def score(
        self,
        prompts: RolePrompt | Sequence[RolePrompt],
        targets: str | Sequence[str] | None = None,
        grafts: Grafts | Mapping[str, Grafts] = None,
        *,
        competitors: str | Sequence[str] | None = None,
        batch_size: int = 64,
    ):
        """Score targets after prompts under each condition, as a `weightgraft run` records them.

        Args:
            prompts: a `weightgraft.Prompt` or a list of them (their roles place role grafts, their
                tokenizer finds the scored token by the runner's rule).
            targets: the answer after each prompt, with its leading space (one string for every
                prompt, or one per prompt); None: each prompt's own `target`.
            grafts: the conditions: a dict {name: Graft, list of Grafts, or None for the recipient},
                or one Graft or list (named "graft"); None: the recipient alone. Tokens after the
                prompt take the grafts of its last token, as in a run.
            competitors: a rival answer per prompt (or one for all): `logit_diff` is the scored
                token's logit minus the rival's scored token's, at the same step.
            batch_size: rows (prompt x condition) per forward pass.

        Returns:
            A polars DataFrame, one row per (condition, prompt): `condition`, `prompt` (its index),
            `example_id`, `target`, `n_target_tokens`, `applicable` (False where a role graft names
            a role the prompt lacks, with `note` saying which), `rank`, `prob`, `target_logprob`,
            `exact_match`, `predicted`, `predicted_id`, `logit_diff`, `top1` ... `top100`.

        Raises:
            DataError: a target that is empty or whitespace alone.
            ValueError: targets or competitors of the wrong length; a bad graft.
        """
        return scoring.score(self, prompts, targets, grafts, competitors, batch_size)

    def run(
        self,
        input_ids: CallInputs,
        grafts: Grafts = None,
        row_grafts: Sequence[Grafts] | None = None,
        attention_mask: torch.Tensor | None = None,
        **model_kwargs,
    ):
        """The grafted pass as transformers returns it (`output_hidden_states`, `output_attentions`).

        Args:
            input_ids: token ids [batch, seq], a `Prompt`, a list of them or a `PromptBatch`.
            grafts: Grafts for every row (their union), as in `logits`.
            row_grafts: each row's own Grafts, as in `logits`.
            attention_mask: 0/1 [batch, seq] for padded token ids.
            **model_kwargs: passed to the recipient's forward, e.g. `output_hidden_states=True`,
                `output_attentions=True` (eager attention only, as in transformers).

        Returns:
            The recipient's output object (`CausalLMOutputWithPast`) for the grafted pass; its
            logits equal `logits(...)` run with `share_prefixes=False`.

        Raises:
            ValueError: bad inputs or grafts (as `logits`).
        """
        return activations.grafted_run(self, input_ids, grafts, row_grafts, attention_mask, **model_kwargs)

    def cache(
        self,
        input_ids: CallInputs,
        grafts: Grafts = None,
        row_grafts: Sequence[Grafts] | None = None,
        attention_mask: torch.Tensor | None = None,
        names: str | Sequence[str] | None = None,
    ) -> dict[str, torch.Tensor]:
        """Activations of the grafted pass by name.

        Args:
            input_ids: token ids [batch, seq], a `Prompt`, a list of them or a `PromptBatch`.
            grafts: Grafts for every row, as in `logits`.
            row_grafts: each row's own Grafts, as in `logits`.
            attention_mask: 0/1 [batch, seq] for padded token ids.
            names: names or glob patterns (`"blocks.*.resid_post"`, `"blocks.3.o"`, `"embed"`);
                None: every activation. The names are listed in docs/api.md and in
                `weightgraft.engine.activations`.

        Returns:
            {name: tensor}, in a fixed order (embeddings, then per block `resid_pre`, its
            components, `resid_post`; then `ln_final`, `lm_head`); each [batch, seq, ...] in the call's
            layout (padding included); `blocks.{i}.z` is [batch, seq, heads, head_dim].

        Raises:
            ValueError: a name or pattern that names no activation; bad inputs or grafts.
        """
        kept, _ = activations.grafted_cache(self, input_ids, grafts, row_grafts, attention_mask, names)
        return kept

    def lens(
        self,
        input_ids: CallInputs,
        grafts: Grafts = None,
        row_grafts: Sequence[Grafts] | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The logit lens of the grafted pass at each row's last real token.

        Args:
            input_ids: token ids [batch, seq], a `Prompt`, a list of them or a `PromptBatch`.
            grafts: Grafts for every row, as in `logits`.
            row_grafts: each row's own Grafts, as in `logits`.
            attention_mask: 0/1 [batch, seq] for padded token ids.

        Returns:
            Logits [batch, layers, vocab]: the residual stream after each block read through the
            recipient's final norm and unembedding (the explorer's basis).

        Raises:
            ValueError: bad inputs or grafts.
        """
        return activations.logit_lens(self, input_ids, grafts, row_grafts, attention_mask)

    def applied(
        self,
        grafts: Grafts = None,
        ids: CallInputs | None = None,
        row_grafts: Sequence[Grafts] | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> AbstractContextManager[activations.GraftedCall]:
        """The grafts installed on the recipient: `with grafter.applied(g, ids=ids): model(ids)`.

        Args:
            grafts: Grafts for every row, as in `logits`.
            ids: the token ids [batch, seq] (or `Prompt`s) the grafts are placed on; a forward of
                the recipient on this shape inside the block is grafted, any other shape (tokens
                that `generate` adds) runs the recipient's own weights.
            row_grafts: each row's own Grafts, as in `logits`.
            attention_mask: 0/1 [batch, seq] for padded token ids.

        Returns:
            A context manager; it yields the call's `input_ids`, `attention_mask` and
            `position_ids` (pass them for padded rows). Hooks added inside the block see the
            grafted outputs. On exit, exception or not, everything is restored.

        Raises:
            ValueError: no ids, or bad inputs or grafts.
        """
        if ids is None:
            raise ValueError("applied needs ids=: the token ids (or Prompts) the grafts are placed on")
        return applied.applied(self, ids, grafts, row_grafts, attention_mask)
