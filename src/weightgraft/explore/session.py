"""The explorer's state and compute, without any web: prompt -> tokens and roles, a selection of
grid cells -> Grafts, and what the page shows (predictions, continuations, attribution).

One `ExploreSession` holds a Grafter, its tokenizer and a dataset's prompts. Every call takes the
whole state it needs (the page keeps the state, in its address), so calls are independent and a
bad one changes nothing. Model calls are serialised by a lock, as the models are shared
(`model_lock`); prompts are encoded by `prompt_encoder`; answers that depend only on the models are
kept in bounded memos (`lru`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from weightgraft.attribution.attribute import AttributionMethod, attribute
from weightgraft.data.schema import EvalPrompt
from weightgraft.engine.graft import Graft
from weightgraft.engine.grafter import Grafter
from weightgraft.explore.compare import MAX_PINS, Pin, extend_cells, graft_donors, score_columns, with_changes
from weightgraft.explore.explore_error import ExploreError
from weightgraft.explore.export import ModelNames, condition_yaml, python_code
from weightgraft.explore.grid import Cells, Grid
from weightgraft.explore.heads import head_attribution
from weightgraft.explore.lru import LRU
from weightgraft.explore.model_lock import ModelLock
from weightgraft.explore.prompt_encoder import Encoded, PromptEncoder
from weightgraft.explore.tokens import token_text

# Bounds on what one request may ask for (the grid is tokens x columns).
MAX_TOKENS = 256
MAX_TOP_K = 20
MAX_NEW_TOKENS = 64
MAX_LISTED_PROMPTS = 5000  # dataset prompts offered in the page's menu (any of them opens by id)
_BASELINE_CACHE = 64
_COLUMN_CACHE = 1024
_LOGITS_CACHE = 4  # [target tokens, vocab] each: the last few grafts' target steps
# The page's integrated-gradients map: 8 midpoint steps, half of `attribute`'s default 16, so that
# the map comes in half the passes while the page waits (the lock is let go between them).
PAGE_INTEGRATION_STEPS = 8


class ExploreSession:
    """The explorer on one Grafter. `prompts` are a dataset's evaluation prompts (with roles);
    `threads`: torch threads for the model calls (None: torch's setting)."""

    def __init__(
        self,
        grafter: Grafter,
        tokenizer,
        prompts: Sequence[EvalPrompt] = (),
        names: ModelNames | None = None,
        max_tokens: int = MAX_TOKENS,
        threads: int | None = None,
    ):
        self.grafter = grafter
        grafter.remember_layers()  # a click recomputes only the layers from the one it changed
        self.tokenizer = tokenizer
        self.prompts = {p.id: p for p in prompts}
        self.names = names
        context = getattr(grafter.recipient.config, "max_position_embeddings", None) or max_tokens
        self.max_tokens = min(max_tokens, int(context))
        self.grid = Grid.of(grafter)
        self.encoder = PromptEncoder(tokenizer, self.prompts, self.max_tokens)
        self.lock = ModelLock(threads)
        self._baselines: LRU[list[torch.Tensor]] = LRU(_BASELINE_CACHE)  # by the prompt's ids
        self.many_rows: LRU = LRU(2 * MAX_LISTED_PROMPTS)  # per dataset prompt: its encoding, the baselines' hits
        self._same: dict[str, list[list]] | None = None  # donor -> identical columns, once asked
        self._columns: LRU[dict] = LRU(_COLUMN_CACHE)  # a comparison's scores per row and graft
        self._logits: LRU[torch.Tensor] = LRU(_LOGITS_CACHE)  # the current graft's target steps

    def running(self):
        """The model lock (`ModelLock.running`): one model call at a time."""
        return self.lock.running()

    def latest_only(self, kind: str):
        """The model lock for one pass of a long request of `kind` (`ModelLock.latest_only`)."""
        return self.lock.latest_only(kind, self.running)

    # --- what the page needs first ----------------------------------------------------------------
    def info(self) -> dict:
        return {
            **self.grid.describe(),
            "prompts": [
                {"id": p.id, "text": p.text, "target": p.target, "template": p.template_id}
                for p in list(self.prompts.values())[:MAX_LISTED_PROMPTS]
            ],
            "limits": {"max_tokens": self.max_tokens, "max_top_k": MAX_TOP_K, "max_new_tokens": MAX_NEW_TOKENS},
            "identical": self.identical_columns(),
            "models": self._models(),
        }

    def identical_columns(self) -> dict[str, list[list]]:
        """Per donor, the grid's columns [group, layer] where its weights equal the recipient's bit for
        bit (a click there cannot change anything); computed once."""
        if self._same is None:
            with self.running():
                same = {d: set(self.grafter.identical_keys(d)) for d in self.grid.donors}
            self._same = {
                d: [
                    [c.group, c.layer]
                    for c in self.grid.columns
                    if all((c.layer, m) in keys for m in self.grid.members(c.group))
                ]
                for d, keys in same.items()
            }
        return self._same

    def _models(self) -> dict:
        """Names and sizes (parameters) of the recipient and each donor, for the page's header."""
        names = self.names
        size = sum(p.numel() for p in self.grafter.recipient.parameters())
        donor_size = lambda d: sum(s.numel() for s in self.grafter.donors[d].parameter_shapes().values())  # noqa: E731
        return {
            "recipient": {"name": names.recipient if names else "recipient", "parameters": size},
            "donors": [
                {"name": d, "source": names.donors.get(d, "") if names else "", "parameters": donor_size(d)}
                for d in self.grid.donors
            ],
        }

    # --- prompts --------------------------------------------------------------------------------
    def encode(self, text: str, target: str = "", prompt_id: str | None = None) -> Encoded:
        """Tokens of a prompt; a dataset prompt (by id, with its text unchanged) also gets roles."""
        return self.encoder.encode(text, target, prompt_id)

    # --- selections -----------------------------------------------------------------------------
    def grafts(self, encoded: Encoded, cells: Sequence[Cells]) -> list[Graft]:
        return self.grid.to_grafts(self.grid.check(cells, len(encoded.input_ids)))

    # --- predictions ----------------------------------------------------------------------------
    def predict(self, encoded: Encoded, cells: Sequence[Cells], top_k: int = 5) -> dict:
        """Top-k next tokens and the target's rank and probability: recipient, each donor alone,
        and the current graft; with the Python and the run-config condition of the graft."""
        if not 1 <= top_k <= MAX_TOP_K:
            raise ExploreError(f"top_k must be in 1..{MAX_TOP_K}, not {top_k}")
        grafts = self.grafts(encoded, cells)
        ids = torch.tensor([encoded.input_ids])
        with self.running():
            baselines = self._baseline_logits(ids)
            if not grafts:
                current = baselines[0]
            elif encoded.target_id is not None:  # one pass serves the predictions and the comparison
                current = self._row_logits(encoded, cells)[len(encoded.input_ids) - encoded.prompt_len]
            else:
                current = self.grafter.last_logits(ids, grafts=grafts)[0]
        names = ["recipient", *self.grid.donors]
        rows = [self._scored(name, logits, encoded, top_k) for name, logits in zip(names, baselines)]
        rows.append(self._scored("graft", current, encoded, top_k))
        condition, why = condition_yaml(
            grafts, encoded.role_positions, len(encoded.input_ids), encoded.roles is not None
        )
        return {
            **self.prompt_view(encoded),
            "predictions": rows,
            "python": python_code(
                encoded.text,
                encoded.input_ids,
                self._tokenizer_matches(encoded),
                grafts,
                self.names,
                whole_donors=self.grid.experts is not None,
            ),
            "condition": condition,
            "condition_note": why,
            "num_grafts": len(grafts),
        }

    def prompt_view(self, encoded: Encoded) -> dict:
        return {
            "tokens": encoded.tokens,
            "roles": encoded.roles,
            "prompt_id": encoded.prompt_id,
            "selections": encoded.selections,
            "target_id": encoded.target_id,
            "target_token": None if encoded.target_id is None else token_text(self.tokenizer, encoded.target_id),
            "target_tokens": [token_text(self.tokenizer, i) for i in encoded.target_ids],
            "scored": encoded.scored,
            "target_note": self._space_note(encoded),
        }

    def _space_note(self, encoded: Encoded) -> str | None:
        """A warning when the target, typed without a leading space, is other tokens than the same
        target with one (most answers are a new word, whose tokens carry the space)."""
        target = encoded.target
        if not target or target[0].isspace() or not encoded.target_ids:
            return None
        try:
            spaced = self.encode(encoded.text, " " + target, encoded.prompt_id)
        except ExploreError:
            return None
        if spaced.target_ids == encoded.target_ids:
            return None
        shown = lambda ids: " · ".join(repr(token_text(self.tokenizer, i)) for i in ids)  # noqa: E731
        return (
            f"the target {target!r} has no leading space: it is {shown(encoded.target_ids)}, while "
            f"{' ' + target!r} would be {shown(spaced.target_ids)}; type the space if the answer is a new word"
        )

    def _baseline_logits(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """Last-token logits of the recipient and of each donor alone (cached per prompt)."""
        rows = [None, *(Graft("all", "all", "all", donor=d) for d in self.grid.donors)]
        compute = lambda: list(self.grafter.last_logits(ids.expand(len(rows), -1), row_grafts=rows))  # noqa: E731
        return self._baselines.get_or(tuple(ids[0].tolist()), compute)

    def _scored(self, name: str, logits: torch.Tensor, encoded: Encoded, top_k: int) -> dict:
        probs = torch.softmax(logits.float(), -1)
        top = torch.topk(probs, min(top_k, probs.shape[-1]))
        row = {
            "name": name,
            "top": [
                {"token": token_text(self.tokenizer, int(i)), "id": int(i), "prob": float(p)}
                for p, i in zip(top.values, top.indices)
            ],
            "target": None,
        }
        if encoded.target_id is not None:
            p = probs[encoded.target_id]
            row["target"] = {"rank": int((probs > p).sum()) + 1, "prob": float(p)}
        return row

    def _tokenizer_matches(self, encoded: Encoded) -> bool:
        """Whether `tokenizer(text).input_ids` gives the grid's tokens (else the Python spells them out)."""
        return list(self.tokenizer(encoded.text)["input_ids"]) == encoded.input_ids

    # --- comparison -----------------------------------------------------------------------------
    def compare(self, encoded: Encoded, cells: Sequence[Cells], pins: Sequence[Pin] = (), competitor: str = "") -> dict:
        """The target's scores (`explore.compare`) under the recipient, each donor alone, the
        current graft and each pinned graft; `competitor`: an answer to take the logit difference
        against (scored at the same step as the target)."""
        if encoded.target_id is None:
            raise ExploreError("the comparison scores the target: give a target")
        if len(pins) > MAX_PINS:
            raise ExploreError(f"at most {MAX_PINS} pinned grafts; unpin some")
        rival = self._rival(encoded, competitor)
        row = encoded.input_ids[: encoded.prompt_len] + encoded.target_ids[:-1]
        n, total = len(encoded.input_ids), len(row)
        named = [
            ("recipient", "recipient", None),
            *(("donor", d, [Graft("all", "all", "all", donor=d)]) for d in self.grid.donors),
        ]
        for kind, label, selection in [("current", "current graft", cells), *(("pin", p.label, p.cells) for p in pins)]:
            grafts = self.grid.to_grafts(extend_cells(self.grid.check(selection, n), n, total))
            named.append((kind, label, grafts or None))
        columns = self._scored_rows(row, encoded, rival, [g for _, _, g in named])
        columns = with_changes(columns, self.grid.donors, [graft_donors(g) for _, _, g in named])
        return {
            "columns": [{"kind": k, "name": name, **c} for (k, name, _), c in zip(named, columns)],
            "donors": self.grid.donors,
            "competitor": None if rival is None else {"text": competitor, "token": token_text(self.tokenizer, rival)},
        }

    def _rival(self, encoded: Encoded, competitor: str) -> int | None:
        """The competing answer's scored token, at the step that scores the target (or None)."""
        if not competitor.strip():
            return None
        other = self.encode(encoded.text, competitor, encoded.prompt_id)
        if other.input_ids != encoded.input_ids:
            raise ExploreError(
                f"the competing answer {competitor!r} is scored after other tokens than the target "
                f"{encoded.target!r} (their whitespace differs): write both with the same leading space"
            )
        return other.target_id

    def _row_logits(self, encoded: Encoded, cells: Sequence[Cells]) -> torch.Tensor:
        """Logits [target tokens, vocab] of the steps that score the target, for the prompt with
        the target teacher-forced under `cells` (their last row carried onto the target): the
        first of them are also the prediction's (a position sees only what comes before it)."""
        row = encoded.input_ids[: encoded.prompt_len] + encoded.target_ids[:-1]
        grafts = self.grid.to_grafts(
            extend_cells(self.grid.check(cells, len(encoded.input_ids)), len(encoded.input_ids), len(row))
        )
        keep = len(encoded.target_ids)
        compute = lambda: self.grafter.logits(torch.tensor([row]), row_grafts=[grafts or None], logits_to_keep=keep)[0]  # noqa: E731
        return self._logits.get_or((tuple(row), repr(grafts or None)), compute)

    def _scored_rows(self, row: list[int], encoded: Encoded, rival: int | None, grafts: list) -> list[dict]:
        """Each selection's scores on `row`, from the cache or in one batch (the recipient's and
        the pinned grafts' stay the same while a click changes the current graft)."""
        keys = [(tuple(row), encoded.scored, rival, repr(g)) for g in grafts]
        with self.running():  # the cache too is shared by the server's threads
            for i, key in enumerate(keys):  # a column whose logits a prediction just computed
                known = self._logits.get((tuple(row), repr(grafts[i])))
                if key not in self._columns and known is not None:
                    self._columns.put(key, score_columns(known[None], encoded.target_ids, encoded.scored, rival)[0])
            missing = [i for i, k in enumerate(keys) if k not in self._columns]
            if missing:
                ids = torch.tensor([row]).expand(len(missing), -1)
                rows = [grafts[i] for i in missing]
                logits = self.grafter.logits(ids, row_grafts=rows, logits_to_keep=len(encoded.target_ids))
                for i, scores in zip(missing, score_columns(logits, encoded.target_ids, encoded.scored, rival)):
                    self._columns.put(keys[i], scores)
            out = [self._columns.get(k) for k in keys]
        return out

    # --- continuation ---------------------------------------------------------------------------
    def generate(
        self, encoded: Encoded, cells: Sequence[Cells], max_new_tokens: int = 20, generated: str = "last"
    ) -> dict:
        """Greedy continuations: the recipient, each donor alone, and the current graft (its
        generated tokens grafted as `generated` says: as the prompt's last token, as a whole target is
        scored, or none)."""
        if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
            raise ExploreError(f"max_new_tokens must be in 1..{MAX_NEW_TOKENS}, not {max_new_tokens}")
        context = getattr(self.grafter.recipient.config, "max_position_embeddings", None)
        if context is not None and len(encoded.input_ids) + max_new_tokens > context:
            raise ExploreError(
                f"the prompt ({len(encoded.input_ids)} tokens) and {max_new_tokens} new tokens exceed "
                f"the model's context of {context}; ask for fewer tokens"
            )
        grafts = self.grafts(encoded, cells)
        ids = torch.tensor([encoded.input_ids])
        rows = [None, *(Graft("all", "all", "all", donor=d) for d in self.grid.donors)]
        settings = dict(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=self._eos())
        running, texts = self.latest_only("generate"), []
        # A row per model lock, so that a click waits for one continuation at most, not all of them;
        # a donor alone carries its every-position graft to the generated tokens.
        for row, as_generated in [*((r, "last") for r in rows), (grafts or None, generated)]:
            with running():
                made = self.grafter.generate(ids, row_grafts=[row], generated=as_generated, **settings)
            texts.append(self._decode_new(made[0, ids.shape[1] :]))
        names = ["recipient", *self.grid.donors, "graft"]
        out = [{"name": name, "text": text} for name, text in zip(names, texts)]
        return {"continuations": out, "generated": generated}

    def _eos(self) -> list[int]:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return [] if eos is None else [int(eos)]

    def _decode_new(self, ids: torch.Tensor) -> str:
        ids = ids.tolist()
        eos = set(self._eos())
        cut = next((i for i, t in enumerate(ids) if t in eos), len(ids))
        return self.tokenizer.decode(ids[:cut])

    # --- attribution ----------------------------------------------------------------------------
    def attribute(self, encoded: Encoded, donor: str, method: str = "gradient") -> dict:
        """Graft attribution of the target's log-probability over the grid, for one donor: each
        cell's effect summed over its group's components (`weightgraft.attribute`)."""
        if encoded.target_id is None:
            raise ExploreError("attribution scores the target: give a target")
        if donor not in self.grid.donors:
            raise ExploreError(f"unknown donor {donor!r}; this session's donors are {self.grid.donors}")
        if method not in tuple(AttributionMethod):
            raise ExploreError(f"method must be gradient or integrated, not {method!r}")
        ids, grain = torch.tensor([encoded.input_ids]), "head" if self.grid.heads else "component"
        result = attribute(  # the model lock per pass: clicks run between an integrated map's steps
            self.grafter,
            ids,
            [encoded.target_id],
            method=method,
            steps=PAGE_INTEGRATION_STEPS,
            donor=donor,
            grain=grain,
            each_pass=self.latest_only("attribute"),
        )
        n = len(encoded.input_ids)
        layer_index = {c: i for i, c in enumerate(result.layer_components)}
        model_index = {c: i for i, c in enumerate(result.model_components)}
        values = []
        for column in self.grid.columns:
            members = self.grid.members(column.group)
            if column.layer is None:
                picked = [model_index[c] for c in members]
                values.append(result.model_level[0, :n, picked].sum(-1))
            else:
                picked = [layer_index[c] for c in members]
                values.append(result.cells[0, :n, column.layer, picked].sum(-1))
        grid = torch.stack(values, dim=1)  # [positions, columns]
        return {
            "donor": donor,
            "method": method,
            "metric": "target log-probability",
            "values": [[round(float(v), 6) for v in row] for row in grid],
            "heads": head_attribution(result.units, self.grid, n),
            "recipient": float(result.metric_recipient[0]),
            "donor_everywhere": float(result.metric_donor[0]),
            "sum": float(grid.sum()),
        }


def donors_from_mapping(donors: Mapping[str, object]) -> dict[str, object]:
    """Donor names as the page shows them: non-empty, short, no markup characters."""
    out = {}
    for name, model in donors.items():
        if not name or len(name) > 32 or not all(ch.isalnum() or ch in "_-." for ch in name):
            raise ExploreError(f"donor name {name!r}: use 1-32 letters, digits, '_', '-' or '.'")
        out[name] = model
    return out
