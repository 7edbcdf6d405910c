"""Records shared by the data, training and experiment layers.

Every evaluation prompt carries the character span of each entity role, so that token
positions can be derived from a tokenizer's offset mapping rather than searched for.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FactKind = Literal["fake_fake", "fake_real", "real_real", "real_shuffled", "user", "world"]

# Entity roles a prompt can mark. The experiment layer maps them to the paper's names:
# first_entity -> FE, movie_title -> M, relation -> R, last_token -> LT.
Role = Literal["first_entity", "movie_title", "relation", "last_token"]


class RelationFact(BaseModel):
    """One movie fact: two co-stars and what an article about their film needs."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: FactKind
    first_actor: str
    second_actor: str
    movie_title: str
    main_character: str
    release_year: int
    genre: str
    city: str
    director: str
    studio: str


class CharSpan(BaseModel):
    """Half-open character range [start, end) in a prompt's text."""

    model_config = ConfigDict(extra="forbid")

    start: int = Field(ge=0)
    end: int = Field(ge=0)


class EvalPrompt(BaseModel):
    """A next-token evaluation prompt: `text` is followed by `target` (with its leading space)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    fact_id: str
    template_id: str
    text: str
    target: str
    reversed: bool = False
    spans: dict[Role, CharSpan]
    # The kind of the fact asked (results are reported per kind); None only in datasets written
    # before weightgraft-data-2, which did not record it.
    fact_kind: FactKind | None = None

    @model_validator(mode="after")
    def _spans_inside_text(self) -> EvalPrompt:
        """A span past the text (a hand edit) would mark no tokens, or the wrong ones."""
        for role, span in self.spans.items():
            if span.end > len(self.text) or span.start > span.end:
                raise ValueError(
                    f"span {role} [{span.start}, {span.end}) does not lie inside the text of "
                    f"{len(self.text)} characters"
                )
        return self
