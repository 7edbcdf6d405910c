"""What the page may send, validated before anything runs: every field typed and bounded, unknown
fields refused. The page keeps the whole state; each request carries what it needs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from weightgraft.explore.compare import MAX_PINS
from weightgraft.explore.many import MAX_PROMPTS
from weightgraft.explore.session import MAX_NEW_TOKENS, MAX_TOKENS, MAX_TOP_K

MAX_TEXT_CHARS = 4000  # characters of a prompt (its tokens are bounded separately)
MAX_CELL_ENTRIES = 4096  # columns x donors of one selection, well above any grid the page draws


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PromptIn(_Strict):
    text: str = Field(max_length=MAX_TEXT_CHARS)
    target: str = Field("", max_length=400)
    prompt_id: str | None = Field(None, max_length=200)


class CellsIn(_Strict):
    """Grafted cells of one grid column from one donor."""

    donor: str = Field(max_length=64)
    group: str = Field(max_length=16)
    layer: int | None = Field(None, ge=0, le=10_000)
    positions: list[int] = Field(max_length=MAX_TOKENS)
    head: int | None = Field(None, ge=-10_000, le=10_000)  # one head of O or ATTN (the grid checks the range)
    expert: int | None = Field(None, ge=-10_000, le=10_000)  # one expert of a MoE layer's FFN (likewise)


class PinIn(_Strict):
    """A pinned graft of the comparison: the page's label and its cells."""

    label: str = Field(max_length=80)
    cells: list[CellsIn] = Field(default_factory=list, max_length=MAX_CELL_ENTRIES)


class PredictIn(_Strict):
    prompt: PromptIn
    cells: list[CellsIn] = Field(default_factory=list, max_length=MAX_CELL_ENTRIES)
    top_k: int = Field(5, ge=1, le=MAX_TOP_K)
    pins: list[PinIn] = Field(default_factory=list, max_length=MAX_PINS)
    competitor: str = Field("", max_length=400)  # an answer to compare the target with (logit difference)


class GenerateIn(_Strict):
    prompt: PromptIn
    cells: list[CellsIn] = Field(default_factory=list, max_length=MAX_CELL_ENTRIES)
    max_new_tokens: int = Field(20, ge=1, le=MAX_NEW_TOKENS)
    generated: Literal["none", "last"] = "last"  # as a whole target is scored: its tokens get the last row's grafts


class AttributeIn(_Strict):
    prompt: PromptIn
    donor: str = Field(max_length=64)
    method: Literal["gradient", "integrated"] = "gradient"


class ExactIn(_Strict):
    prompt: PromptIn
    donor: str = Field(max_length=64)
    cells: list[CellsIn] = Field(default_factory=list, max_length=MAX_CELL_ENTRIES)  # the current graft
    heads: list[int] = Field(default_factory=list, max_length=1024)  # layers whose heads are run too
    experts: list[int] = Field(default_factory=list, max_length=1024)  # layers whose experts are run too


class LensIn(_Strict):
    prompt: PromptIn
    cells: list[CellsIn] = Field(default_factory=list, max_length=MAX_CELL_ENTRIES)


class ManyIn(_Strict):
    prompt: PromptIn
    cells: list[CellsIn] = Field(default_factory=list, max_length=MAX_CELL_ENTRIES)
    count: int = Field(100, ge=1, le=MAX_PROMPTS)
    template: str | None = Field(None, max_length=200)
