"""Prompts encoded for attribution and the minimal-graft search: tokens, the scored target token,
and each of the paper's roles' positions (FE, M, R, LT, other), read from the prompts' spans."""

from __future__ import annotations

from dataclasses import dataclass

from weightgraft.attribution.attribute import PAPER_ROLES, position_roles
from weightgraft.data.encode import encode_scored_prompt


@dataclass
class RoleExample:
    """One prompt encoded for attribution and `localize`: its tokens, the target's scored token
    (its first, or its first that is not whitespace alone: then `input_ids` ends with the
    whitespace tokens before it, in the last token's role; `data.encode`), and each paper role's
    positions (the runner's encoded prompt, in `experiments/`, keeps every target token and the
    positions by template role)."""

    id: str
    fact_id: str
    template: str
    input_ids: list[int]
    target_id: int
    roles: dict[str, list[int]]  # paper role -> real-token positions (other included)
    tokens: list[str]
    target: str = ""  # the scored target token, as text


def encode_role_examples(tokenizer, prompts) -> list[RoleExample]:
    """EvalPrompts of a weightgraft dataset -> Examples (roles from the prompts' character spans)."""
    out = []
    for prompt in prompts:
        enc = encode_scored_prompt(tokenizer, prompt)
        named = position_roles({str(k): v for k, v in enc.positions.items()}, len(enc.input_ids))
        # A target's whitespace-only first tokens are teacher-forced before its scored token
        # (data.encode) and take the prompt's last token's role, as the runner's rows do.
        named += [named[-1]] * enc.scored
        roles = {role: [p for p, r in enumerate(named) if r == role] for role in PAPER_ROLES}
        tokens = [tokenizer.decode([i]) for i in enc.scoring_ids]
        out.append(
            RoleExample(
                prompt.id,
                prompt.fact_id,
                prompt.template_id,
                list(enc.scoring_ids),
                int(enc.scored_id),
                {r: p for r, p in roles.items() if p},
                tokens,
                tokenizer.decode([enc.scored_id]),
            )
        )
    return out
