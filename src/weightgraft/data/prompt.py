"""`Prompt`: a prompt's tokens with the roles of the paper (FE, M, R, LT), for the Python API.

Built from text and the entities it names, or from a dataset row, through the runner's own
encoding (`data.encode`: roles from the tokenizer's offsets, the scored target token), so that a
`Graft(positions="FE+LT")` grafts, and `Grafter.score` scores, exactly what a run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from weightgraft.data.data_errors import DataError
from weightgraft.data.encode import EncodedPrompt, describe_scored, encode_roles, encode_scored_prompt
from weightgraft.data.schema import CharSpan, EvalPrompt, Role
from weightgraft.engine.roles import parse_positions

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Prompt's keyword -> the role it marks.
ENTITY_ROLES: dict[str, Role] = {"first_entity": "first_entity", "movie": "movie_title", "relation": "relation"}


class RoleError(DataError):
    """An entity that is not in the prompt's text, or a role that does not map onto its tokens."""


@dataclass(frozen=True)
class PromptBatch:
    """Prompts padded into one batch: `input_ids` and `attention_mask` [batch, seq] and each
    row's `roles` (indices among its real tokens). A `Grafter` call takes it as its input."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    roles: list[dict[str, list[int]]]


class Prompt:
    """A prompt's tokens and the token positions of its entity roles.

    Args:
        tokenizer: a fast tokenizer (its offsets map the entities onto tokens).
        text: the prompt, e.g. "Keanu Reeves stars in a movie alongside".
        first_entity: the first entity as written in `text` (role FE); its first occurrence.
        movie: the movie title as written in `text` (role M).
        relation: the relation word as written in `text` (role R, e.g. "stars").
        target: the answer that follows the prompt, with its leading space (" Carrie-Anne Moss");
            `Grafter.score` scores it when given no targets of its own.
        id: a name for the prompt in errors and scores.

    The last token is always role LT. `prompt.roles` maps role names (`first_entity`,
    `movie_title`, `relation`, `last_token`) to token indices; `prompt.positions("FE+LT")`
    evaluates any position expression of the run configs.

    Raises:
        RoleError: an entity is not in the text, or does not cover whole tokens.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        text: str,
        *,
        first_entity: str | None = None,
        movie: str | None = None,
        relation: str | None = None,
        target: str | None = None,
        id: str = "prompt",
    ):
        entities = {"first_entity": first_entity, "movie": movie, "relation": relation}
        spans = {ENTITY_ROLES[k]: _span_of(text, v, k, id) for k, v in entities.items() if v is not None}
        self._setup(
            tokenizer, EvalPrompt(id=id, fact_id="", template_id="", text=text, target=target or "", spans=spans)
        )

    @classmethod
    def from_row(cls, tokenizer: PreTrainedTokenizerBase, row: EvalPrompt | dict) -> Prompt:
        """A dataset row (an `EvalPrompt`, or its dict as in `eval.jsonl`) with its spans and target.

        Args:
            tokenizer: a fast tokenizer.
            row: the dataset row.

        Returns:
            The `Prompt`, whose roles are the runner's for that row.

        Raises:
            RoleError: a span does not cover whole tokens.
        """
        prompt = cls.__new__(cls)
        prompt._setup(tokenizer, row if isinstance(row, EvalPrompt) else EvalPrompt.model_validate(row))
        return prompt

    def _setup(self, tokenizer: PreTrainedTokenizerBase, row: EvalPrompt) -> None:
        self.tokenizer, self.row = tokenizer, row
        try:
            ids, roles = encode_roles(tokenizer, row.text, row.spans, row.id)
        except DataError as err:
            raise RoleError(f"{err}; name the entity as whole words of the prompt") from None
        roles["last_token"] = [len(ids) - 1]
        self.input_ids: list[int] = list(ids)
        self.roles: dict[str, list[int]] = {str(k): list(v) for k, v in roles.items()}

    @property
    def text(self) -> str:
        return self.row.text

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def target(self) -> str:
        return self.row.target

    @property
    def tokens(self) -> list[str]:
        """Each token as text."""
        return [self.tokenizer.decode([t]) for t in self.input_ids]

    def positions(self, expr: str) -> list[int]:
        """Token indices of a position expression.

        Args:
            expr: a position expression of the run configs: FE, M, R, LT, other, ALL, NONE,
                joined with '+', complemented with '^C', grouped with parentheses.

        Returns:
            The sorted token indices it selects on this prompt.

        Raises:
            ValueError: the expression does not parse.
            NotApplicable: it names a role this prompt lacks.
        """
        return parse_positions(expr).evaluate(self.roles, len(self.input_ids))

    def encode(self, target: str | None = None) -> EncodedPrompt:
        """The prompt with a target, encoded as the runner encodes it (`data.encode`).

        Args:
            target: the answer with its leading space; None: the prompt's own `target`.

        Returns:
            The `EncodedPrompt`: target token ids and the index of the scored one.

        Raises:
            DataError: the target is empty, or is whitespace alone.
        """
        text = self.target if target is None else target
        if not text:
            raise DataError(f"prompt {self.id!r} has no target to score; pass targets= or Prompt(..., target=...)")
        return encode_scored_prompt(self.tokenizer, self.row.model_copy(update={"target": text}))

    def scored_note(self, encoded: EncodedPrompt) -> str:
        """The runner's note on a target whose scored token is not its first (empty otherwise)."""
        return describe_scored(self.tokenizer, encoded)

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids as text, by this prompt's tokenizer."""
        return self.tokenizer.decode(list(ids))

    def __repr__(self) -> str:
        return f"Prompt({self.text!r}, roles={self.roles})"

    @staticmethod
    def batch(prompts: Sequence[Prompt], padding_side: str = "left") -> PromptBatch:
        """Prompts padded into one batch, for a `Grafter` call.

        Args:
            prompts: the prompts, one row each.
            padding_side: "left" (as `generate` needs) or "right".

        Returns:
            A `PromptBatch` of ids, mask and each row's roles.

        Raises:
            ValueError: no prompts, or an unknown padding side.
        """
        if not prompts or padding_side not in ("left", "right"):
            raise ValueError("Prompt.batch needs one prompt or more and padding_side 'left' or 'right'")
        width = max(len(p.input_ids) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):
            n = len(p.input_ids)
            where = slice(width - n, width) if padding_side == "left" else slice(0, n)
            ids[row, where], mask[row, where] = torch.tensor(p.input_ids), 1
        return PromptBatch(ids, mask, [dict(p.roles) for p in prompts])


def _span_of(text: str, entity: str, keyword: str, prompt_id: str) -> CharSpan:
    """The character span of an entity's first occurrence in the text."""
    start = text.find(entity) if entity.strip() else -1
    if start < 0:
        raise RoleError(
            f"prompt {prompt_id!r}: {keyword}={entity!r} is not in its text {text!r}; "
            "pass the entity exactly as the text writes it"
        )
    return CharSpan(start=start, end=start + len(entity))
