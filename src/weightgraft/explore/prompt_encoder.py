"""A prompt as the explorer's grid sees it: its tokens, each token's role (for a dataset prompt),
the target's tokens and the scored one, and the named position sets the prompt has.

The encoding is the runner's (`data.encode`), so the page's numbers are a run's; free text gets
tokens and the last token's role only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from weightgraft.attribution.attribute import position_roles
from weightgraft.data.encode import SpanMappingError, encode_prompt
from weightgraft.data.schema import EvalPrompt
from weightgraft.experiments.conditions.position_roles import NotApplicable, parse_positions
from weightgraft.explore.explore_error import ExploreError
from weightgraft.explore.tokens import token_text

# Named position selections offered for a prompt, when its roles allow them.
NAMED_POSITIONS = ("FE", "M", "R", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C", "FE+M+LT", "M+LT", "other", "ALL")


@dataclass
class Encoded:
    """A prompt as the grid sees it."""

    text: str
    target: str
    prompt_id: str | None
    input_ids: list[int]
    tokens: list[str]
    roles: list[str] | None  # the paper's role of each token (FE, M, R, LT, other); None for free text
    role_positions: dict[str, list[int]]
    target_id: int | None
    selections: dict[str, list[int]] = field(default_factory=dict)
    target_ids: list[int] = field(default_factory=list)  # the whole target's tokens
    scored: int = 0  # the index of the scored one (after whitespace-only tokens, teacher-forced)
    unit: int = 1  # target tokens from the scored one that spell its first character (data.encode)
    prompt_len: int = 0  # tokens of the prompt alone

    @property
    def unit_ids(self) -> list[int]:
        """The scored unit's tokens (the first character's, teacher-forced after the prompt)."""
        return self.target_ids[self.scored : self.scored + self.unit]


class PromptEncoder:
    """Encodes the page's prompts with the session's tokenizer. `prompts`: the dataset's prompts
    by id (with roles); `max_tokens`: the longest prompt the grid takes."""

    def __init__(self, tokenizer, prompts: Mapping[str, EvalPrompt], max_tokens: int):
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.max_tokens = max_tokens

    def encode(self, text: str, target: str = "", prompt_id: str | None = None) -> Encoded:
        """Tokens of a prompt; a dataset prompt (by id, with its text unchanged) also gets roles."""
        if not text.strip():
            raise ExploreError("the prompt is empty; type a prompt or pick one of the dataset's")
        dataset = None
        if prompt_id is not None:
            if prompt_id not in self.prompts:
                raise ExploreError(f"unknown dataset prompt {prompt_id!r}; pick one from the list")
            if self.prompts[prompt_id].text == text:
                dataset = self.prompts[prompt_id]
        try:
            if dataset is not None:
                enc = encode_prompt(self.tokenizer, dataset.model_copy(update={"target": target or dataset.target}))
                roles_by_name = dict(enc.positions)
            elif target:
                free = EvalPrompt(id="free", fact_id="", template_id="", text=text, target=target, spans={})
                enc = encode_prompt(self.tokenizer, free)
                roles_by_name = {}
            else:
                enc, roles_by_name = None, {}
        except SpanMappingError as err:
            raise ExploreError(f"{err}; change the prompt or the target") from None
        # A target whose first tokens are whitespace alone is scored at its first token that
        # carries content (data.encode): those tokens join the prompt, in the last token's role,
        # as the runner teacher-forces them with the last token's grafts.
        ids = self.ids(text) if enc is None else enc.scoring_ids
        if len(ids) > self.max_tokens:
            raise ExploreError(
                f"the prompt has {len(ids)} tokens; the explorer takes at most {self.max_tokens} "
                "(the model's context or the grid's bound): shorten it"
            )
        roles_by_name["last_token"] = list(range(len(ids) - 1 - (enc.scored if enc else 0), len(ids)))
        roles = position_roles(roles_by_name, len(ids)) if dataset is not None else None
        encoded = Encoded(
            text=text,
            target=target,
            prompt_id=dataset.id if dataset is not None else None,
            input_ids=list(ids),
            tokens=[token_text(self.tokenizer, i) for i in ids],
            roles=roles,
            role_positions=roles_by_name,
            target_id=enc.scored_id if enc is not None and enc.target_ids else None,
            target_ids=list(enc.target_ids) if enc is not None else [],
            scored=enc.scored if enc is not None else 0,
            unit=enc.unit if enc is not None else 1,
            prompt_len=len(enc.input_ids) if enc is not None else len(ids),
        )
        encoded.selections = self.selections(encoded)
        return encoded

    def ids(self, text: str) -> list[int]:
        """The prompt's token ids, without an end-of-sequence token a tokenizer appends."""
        ids = list(self.tokenizer(text)["input_ids"])
        special = set(getattr(self.tokenizer, "all_special_ids", []))
        while len(ids) > 1 and ids[-1] in special:  # an EOS some tokenizers append
            ids.pop()
        return ids

    def selections(self, encoded: Encoded) -> dict[str, list[int]]:
        """Named position sets this prompt has (free text: only those built from LT)."""
        out = {}
        n = len(encoded.input_ids)
        for name in NAMED_POSITIONS:
            if encoded.roles is None and name not in ("LT", "LT^C", "ALL"):
                continue
            try:
                out[name] = parse_positions(name).evaluate(encoded.role_positions, n)
            except NotApplicable:
                continue
        return out
