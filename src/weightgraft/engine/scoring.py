"""Scores of a target after a prompt, as the paper measures them: one implementation for the
runner (`experiments.execute`, through `experiments.metrics`) and the API (`Grafter.score`).

A row is a prompt followed by its target's tokens except the last, teacher-forced; the logits at
the prompt's last token score the target's first token (where the target's first tokens are
whitespace alone, the logits after them score its first token that carries content: the scored
token of `data.encode`, which a `weightgraft.Prompt` computes by the runner's code; where a
byte-level tokenizer splits the name's first character over several tokens, the scored unit is
all of them, see `score_rows`), and the logits from there on score the whole target. Tokens after the prompt take the grafts of the
prompt's last token, as the run configs' conditions give them (`Condition.row_masks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import torch

from weightgraft.engine.graft import Graft, as_graft_list
from weightgraft.engine.grafter_protocol import GraftPasses
from weightgraft.engine.inputs import RolePrompt, align_on
from weightgraft.engine.roles import NotApplicable

TOP_K = (1, 5, 10, 50, 100)  # the runner's top-k metrics (experiments.vocabulary.SUMMARY_METRICS)


@dataclass(frozen=True)
class TargetScore:
    """How one row scores its target (see `score_rows` for each measure's definition): what a
    result file's row, the API's table and the explorer's columns are made from."""

    rank: int
    prob: float
    target_logprob: float
    exact_match: bool
    predicted_id: int


def score_rows(
    logits: torch.Tensor,
    first_steps: list[int],
    targets: list[list[int]],
    scored: list[int] | None = None,
    units: list[int] | None = None,
) -> list[TargetScore]:
    """Scores for each row of `logits` [rows, seq, vocab], or of a list of per-row [seq, vocab]
    tensors; `first_steps[row]` indexes the logits that score the row's first target token (the
    prompt's last token: its length - 1 in a right-padded row); `scored[row]` (default 0) the
    target token that rank, prob and predicted_id score (`Example.scored`); `units[row]`
    (default 1) how many target tokens from there on make the scored unit (`Example.unit`: the
    tokens of a first character that a byte-level tokenizer splits).

    rank: 1 + the number of vocabulary entries with a strictly larger logit than the scored
    target token (ties count in the target's favour); for a unit of several tokens, the largest
    of its tokens' ranks, each at its teacher-forced step, so top-k means every token of the unit
    is in the top k (top-1: greedy decoding writes the whole first character); prob: the softmax
    probability of the scored token, for a unit the product of its tokens' (the probability of
    writing the first character); target_logprob: sum of log-probabilities of all target tokens;
    exact_match: greedy decoding yields exactly the target tokens; predicted_id: the argmax where
    the scored token (the unit's first) is scored."""
    # Gather every scored step of every row into one [steps, vocab] block: a few large tensor
    # operations instead of several small ones per row.
    if not torch.is_tensor(logits):  # one [seq, vocab] tensor per row (rows of varied width)
        steps = torch.cat([row[n : n + len(t)] for row, n, t in zip(logits, first_steps, targets)]).float()
        device = steps.device
    else:
        device = logits.device
        row_of = [r for r, t in enumerate(targets) for _ in t]
        pos_of = [first_steps[r] + j for r, t in enumerate(targets) for j in range(len(t))]
        steps = logits[torch.tensor(row_of, device=device), torch.tensor(pos_of, device=device)].float()
    _check_units(targets, scored, units)
    row_of = [r for r, t in enumerate(targets) for _ in t]
    tokens = torch.tensor([tok for t in targets for tok in t], device=device)
    logp = torch.log_softmax(steps, dim=-1)
    token_logp = logp.gather(1, tokens[:, None])[:, 0]
    correct = steps.argmax(-1) == tokens
    firsts = torch.tensor([0] + [len(t) for t in targets[:-1]], device=device).cumsum(0)
    if scored is not None and any(scored):
        firsts = firsts + torch.tensor(scored, device=device)
    ranks, unit_logp = _unit_scores(steps, tokens, token_logp, firsts, units)
    rows = torch.tensor(row_of, device=device)
    total_logp = torch.zeros(len(targets), device=device).index_add_(0, rows, token_logp)
    wrong = torch.zeros(len(targets), device=device).index_add_(0, rows, (~correct).float())
    ranks, probs = ranks.tolist(), unit_logp.exp().tolist()
    total_logp, wrong = total_logp.tolist(), wrong.tolist()
    predicted = steps[firsts].argmax(-1).tolist()
    return [
        TargetScore(int(ranks[i]), float(probs[i]), float(total_logp[i]), wrong[i] == 0, int(predicted[i]))
        for i in range(len(targets))
    ]


def _check_units(targets: list[list[int]], scored: list[int] | None, units: list[int] | None) -> None:
    """Every scored unit lies inside its row's target (past it, its steps would be the next row's)."""
    if units is None:
        return
    starts = scored or [0] * len(targets)
    short = [r for r, (t, s, u) in enumerate(zip(targets, starts, units)) if u < 1 or s + u > len(t)]
    if short:
        r = short[0]
        raise ValueError(
            f"row {r}'s scored unit of {units[r]} token(s) from target token {starts[r]} does not fit "
            f"its target's {len(targets[r])} tokens; encode the prompt with data.encode (it sets both)"
        )


def _unit_scores(
    steps: torch.Tensor, tokens: torch.Tensor, token_logp: torch.Tensor, firsts: torch.Tensor, units: list[int] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's rank and log-probability of its scored unit (`score_rows`): the largest rank and
    the summed log-probability of the unit's tokens, at the flat steps `firsts[row]` onwards."""
    if units is None or all(u == 1 for u in units):
        picked, owner, count = firsts, None, len(firsts)
    else:
        picked = torch.cat([firsts[r] + torch.arange(u, device=firsts.device) for r, u in enumerate(units)])
        owner = torch.tensor([r for r, u in enumerate(units) for _ in range(u)], device=firsts.device)
        count = len(units)
    at = steps[picked]
    ranks = (at > at.gather(1, tokens[picked][:, None])).sum(-1) + 1
    if owner is None:
        return ranks, token_logp[picked]
    worst = torch.zeros(count, dtype=ranks.dtype, device=ranks.device).scatter_reduce_(0, owner, ranks, "amax")
    return worst, torch.zeros(count, device=steps.device).index_add_(0, owner, token_logp[picked])


def conditions_of(grafts) -> dict[str, list[Graft]]:
    """`grafts` as named conditions: a dict {name: Graft, list of Grafts or None (the recipient)},
    or one Graft or list of them (named "graft"); None alone is the recipient ("recipient")."""
    if grafts is None:
        return {"recipient": []}
    if isinstance(grafts, Mapping):
        if not grafts:
            raise ValueError("grafts is an empty dict; name at least one condition, e.g. {'PRE': None}")
        return {str(name): as_graft_list(value) for name, value in grafts.items()}
    return {"graft": as_graft_list(grafts)}


def row_grafts_of(grafts: list[Graft], roles: dict[str, list[int]], prompt_len: int, total: int) -> list[Graft]:
    """One row's Grafts with concrete positions over its `total` tokens: each graft's positions
    on the prompt, the prompt's last token's choice copied to the teacher-forced target tokens.
    Grafts that select nothing are left out. Raises NotApplicable (a role the prompt lacks)."""
    out = []
    for graft in grafts:
        kind, value = graft._positions
        chosen = set(value.evaluate(roles, prompt_len) if kind == "roles" else graft.position_indices(prompt_len))
        mask = [i in chosen for i in range(prompt_len)]
        mask += [mask[-1]] * (total - prompt_len)
        if any(mask):
            out.append(replace(graft, positions=mask))
    return out


def score(grafter: GraftPasses, prompts, targets, grafts, competitors, batch_size: int):
    """`Grafter.score`'s work: every (prompt, condition) row, in batches of `batch_size` rows, as a
    polars DataFrame of the runner's record fields (see `Grafter.score`)."""
    import polars as pl

    prompts = list(prompts) if isinstance(prompts, (list, tuple)) else [prompts]
    odd = [type(p).__name__ for p in prompts if not (isinstance(p, RolePrompt) and hasattr(p, "encode"))]
    if odd or not prompts:
        raise TypeError(
            f"score takes prompts with roles (weightgraft.Prompt, or a list of them), not {odd or 'nothing'}: "
            "their tokenizer finds the token the runner scores"
        )
    targets = _per_prompt(targets, len(prompts), "targets")
    rivals = _per_prompt(competitors, len(prompts), "competitors")
    encoded = [p.encode(t) for p, t in zip(prompts, targets)]
    rival_ids = [None if r is None else rival_id(p, e, r) for p, e, r in zip(prompts, encoded, rivals)]
    conditions = conditions_of(grafts)
    rows, records = [], []
    for name, chosen in conditions.items():
        for index, (prompt, enc) in enumerate(zip(prompts, encoded)):
            record = {"condition": name, "prompt": index, "example_id": prompt.id, "target": enc_target(prompt, enc)}
            record["n_target_tokens"] = len(enc.target_ids)
            total = len(enc.input_ids) + len(enc.target_ids) - 1
            try:
                rows.append((len(records), enc, row_grafts_of(chosen, prompt.roles, len(enc.input_ids), total)))
                record.update(applicable=True, note=_note(prompt, enc))
            except NotApplicable as err:
                record.update(applicable=False, note=str(err))
            records.append(record)
    for start in range(0, len(rows), batch_size):
        _score_batch(grafter, rows[start : start + batch_size], records, prompts, rival_ids)
    columns = ["rank", "prob", "target_logprob", "exact_match", "predicted", "predicted_id", "logit_diff", "note"]
    for record in records:
        for column in columns:
            record.setdefault(column, "" if column == "note" else None)
        for k in TOP_K:
            record[f"top{k}"] = None if record["rank"] is None else record["rank"] <= k
    return pl.DataFrame(records, infer_schema_length=None)


def rival_id(prompt, enc, rival: str) -> int:
    """The competitor's scored token; it must follow the same teacher-forced tokens as the
    target's (the same leading whitespace), or the two logits would be read at different steps.
    Neither may have a scored unit of several tokens: one step's logits cannot compare two
    characters whose first byte tokens are often the same (`data.encode`)."""
    other = prompt.encode(rival)
    split = [(t, e.unit) for t, e in ((prompt.decode(enc.target_ids), enc), (rival, other)) if e.unit > 1]
    if split:
        text, unit = split[0]
        raise ValueError(
            f"{text!r} begins with a character the tokenizer splits over {unit} tokens, so a logit "
            "difference at one step would compare byte tokens, not names: score the target and the "
            "competitor as two targets and compare their `prob` (the probability of each first character)"
        )
    if other.target_ids[: other.scored] != enc.target_ids[: enc.scored]:
        raise ValueError(
            f"the competitor {rival!r} is scored after other tokens than the target {prompt.decode(enc.target_ids)!r} "
            "(their leading whitespace differs): write both with the same leading space"
        )
    return other.scored_id


def enc_target(prompt, enc) -> str:
    """The target as text, from its tokens."""
    return prompt.decode(enc.target_ids)


def _score_batch(grafter: GraftPasses, batch: list, records: list[dict], prompts, rival_ids) -> None:
    """Score one batch of rows (record index, encoded prompt, row grafts) into their records."""
    seqs = [enc.input_ids + enc.target_ids[:-1] for _, enc, _ in batch]
    ids, mask, column = align_on(seqs, [len(enc.input_ids) - 1 for _, enc, _ in batch], 0)
    logits = grafter.logits(
        ids, row_grafts=[g or None for _, _, g in batch], attention_mask=mask, logits_to_keep=ids.shape[1] - column
    )
    targets = [enc.target_ids for _, enc, _ in batch]
    scored, units = [enc.scored for _, enc, _ in batch], [enc.unit for _, enc, _ in batch]
    scores = score_rows(logits, [0] * len(batch), targets, scored, units)
    for row, ((index, enc, _), found) in enumerate(zip(batch, scores)):
        record = records[index]
        record.update(asdict(found))
        record["predicted"] = prompts[record["prompt"]].decode([found.predicted_id])
        rival = rival_ids[record["prompt"]]
        if rival is not None:
            step = logits[row, enc.scored].float()
            record["logit_diff"] = float(step[enc.scored_id] - step[rival])


def _note(prompt, enc) -> str:
    """The runner's note on the scored token, where the prompt can give it."""
    note = getattr(prompt, "scored_note", None)
    return note(enc) if note is not None else ""


def _per_prompt(value, count: int, what: str) -> list:
    """One entry per prompt: a list of `count`, or one value (or None) for every prompt."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{what} has {len(value)} entries for {count} prompts; give one per prompt")
        return list(value)
    return [value] * count
