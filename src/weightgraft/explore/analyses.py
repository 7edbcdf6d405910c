"""The explorer's slower analyses of the current graft, on an `ExploreSession`: the exact effect
map (`effects`), the logit lens (`lens`) and the graft over many dataset prompts (`many`).

Each checks its request, runs under the session's model lock (the exact map and the many-prompt
scoring a pass or a prompt at a time, so that clicks are not held up) and returns what the page
draws. Kept apart from the session, which answers the clicks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from weightgraft.attribution.attribute import attribute
from weightgraft.engine.graft import Graft
from weightgraft.explore.effects import (
    agreement,
    leave_one_out_effects,
    single_cell_effects,
    single_expert_effects,
    single_head_effects,
)
from weightgraft.explore.experts import EXPERT_GROUP, expert_attribution
from weightgraft.explore.explore_error import ExploreError
from weightgraft.explore.export import NotRoles, graft_roles
from weightgraft.explore.grid import Cells
from weightgraft.explore.heads import nested
from weightgraft.explore.lens import logit_lens
from weightgraft.explore.many import MAX_PROMPTS, RoleGraft, chosen_prompts, score_prompts
from weightgraft.explore.prompt_encoder import Encoded
from weightgraft.explore.session import PAGE_INTEGRATION_STEPS, ExploreSession


def exact_map(
    session: ExploreSession,
    encoded: Encoded,
    donor: str,
    cells: Sequence[Cells] = (),
    head_layers: Sequence[int] = (),
    expert_layers: Sequence[int] = (),
) -> dict:
    """The exact effect map for one donor (`explore.effects`): every cell grafted alone (and
    every head of O and ATTN at `head_layers`, every expert of FFN at `expert_layers`), each cell
    of the current graft left out of it, and the first-order map's error against it."""
    if encoded.target_id is None:
        raise ExploreError("the exact map scores the target: give a target")
    if donor not in session.grid.donors:
        raise ExploreError(f"unknown donor {donor!r}; this session's donors are {session.grid.donors}")
    checked = session.grid.check(cells, len(encoded.input_ids))
    head_layers, expert_layers = _head_layers(session, head_layers), _expert_layers(session, expert_layers)
    identical = {(group, layer) for group, layer in session.identical_columns()[donor]}
    start = time.perf_counter()
    running = session.latest_only("exact")
    ids, target, grafter, grid = encoded.input_ids, encoded.target_id, session.grafter, session.grid
    single = single_cell_effects(grafter, grid, ids, target, donor, identical, running)
    left_out = leave_one_out_effects(grafter, grid, ids, target, checked, running) if checked else None
    heads, head_rows = {}, 0
    if head_layers:
        heads, head_rows = single_head_effects(grafter, grid, ids, target, donor, identical, head_layers, running)
    experts, expert_rows = None, 0
    if expert_layers:
        experts, expert_rows = single_expert_effects(
            grafter, grid, ids, target, donor, identical, expert_layers, running
        )
    seconds = time.perf_counter() - start
    estimate = session.attribute(encoded, donor, "gradient")
    return {
        "donor": donor,
        "metric": "target log-probability change",
        "values": [[round(float(v), 6) for v in row] for row in single.values],
        "ran": single.ran.tolist(),
        "rows": single.rows + head_rows + expert_rows + (left_out["rows"] if left_out else 0),  # every row run
        "heads": {group: nested(values) for group, values in heads.items()} or None,
        "experts": None if experts is None else {EXPERT_GROUP: nested(experts)},
        "seconds": round(seconds, 3),
        "leave_one_out": left_out,
        "first_order": {
            "method": estimate["method"],
            **agreement(torch.tensor(estimate["values"]), single.values, single.ran),
        },
    }


def _head_layers(session: ExploreSession, layers: Sequence[int]) -> list[int]:
    """The layers whose O and ATTN the exact map runs head by head, checked."""
    layers = sorted(set(layers))
    if layers and session.grid.heads is None:
        raise ExploreError("this model's heads cannot be told apart, so the exact map has no heads")
    if layers and not 0 <= layers[0] <= layers[-1] < session.grid.num_layers:
        raise ExploreError(f"layers split into heads must be in 0..{session.grid.num_layers - 1}, not {layers}")
    return layers


def _expert_layers(session: ExploreSession, layers: Sequence[int]) -> list[int]:
    """The layers whose FFN the exact map runs expert by expert, checked."""
    layers = sorted(set(layers))
    if layers and session.grid.experts is None:
        raise ExploreError(
            "this model has no mixture-of-experts blocks, so the exact map has no experts; send no expert layers"
        )
    if layers and not 0 <= layers[0] <= layers[-1] < session.grid.num_layers:
        raise ExploreError(f"layers split into experts must be in 0..{session.grid.num_layers - 1}, not {layers}")
    return layers


def attribution(session: ExploreSession, encoded: Encoded, donor: str, method: str = "gradient") -> dict:
    """The session's attribution map, and on a mixture-of-experts model each expert cell's
    (`attribute(grain="expert")`, one more pass: one grain per pass), {"FFN": [position][layer][expert]}."""
    out = session.attribute(encoded, donor, method)
    out["experts"] = None
    if session.grid.experts is not None:
        ids, running = torch.tensor([encoded.input_ids]), session.latest_only("attribute-experts")
        result = attribute(
            session.grafter,
            ids,
            [encoded.target_id],
            method=method,
            steps=PAGE_INTEGRATION_STEPS,  # the same map as the components', expert by expert
            donor=donor,
            grain="expert",
            each_pass=running,
        )
        out["experts"] = expert_attribution(result.units, len(encoded.input_ids))
    return out


def lens(session: ExploreSession, encoded: Encoded, cells: Sequence[Cells] = ()) -> dict:
    """The logit lens (`explore.lens`) of the recipient, each donor alone and the current graft:
    the target's log-probability and rank after every block, read through the recipient's head."""
    if encoded.target_id is None:
        raise ExploreError("the logit lens follows the target: give a target")
    grafts = session.grafts(encoded, cells)
    names = ["recipient", *session.grid.donors, "graft"]
    rows = [None, *([Graft("all", "all", "all", donor=d)] for d in session.grid.donors), grafts or None]
    with session.running():
        lines = logit_lens(session.grafter, encoded.input_ids, encoded.target_id, rows)
    return {
        "readout": "the recipient's final norm and unembedding",
        "layers": session.grid.num_layers,
        "lines": [
            {
                "name": name,
                "logprob": [round(v, 6) for v in lines["logprob"][i]],
                "rank": lines["rank"][i],
                "output_logprob": round(lines["output_logprob"][i], 6),
                "output_rank": lines["output_rank"][i],
            }
            for i, name in enumerate(names)
        ],
    }


def many_prompts(
    session: ExploreSession, encoded: Encoded, cells: Sequence[Cells], count: int = 100, template: str | None = None
) -> dict:
    """The current graft over `count` dataset prompts (of one template, when given), its
    positions read as roles (`explore.many`): top-5 with intervals and the donors' gain recovered."""
    if not 1 <= count <= MAX_PROMPTS:
        raise ExploreError(f"count must be in 1..{MAX_PROMPTS}, not {count}")
    if not session.prompts:
        raise ExploreError("this explorer has no dataset prompts; start it with --data")
    templates = sorted({p.template_id for p in session.prompts.values()})
    if template is not None and template not in templates:
        raise ExploreError(f"unknown template {template!r}; this dataset's are {templates}")
    grafts = session.grafts(encoded, cells)
    try:
        roles = graft_roles(grafts, encoded.role_positions, len(encoded.input_ids), encoded.roles is not None)
    except NotRoles as err:
        raise ExploreError(
            f"{err}, so they mean nothing on other prompts; select roles (FE, M, R, LT, other)"
            + ("" if encoded.roles is not None else ", on a dataset prompt, whose tokens have roles")
        ) from None
    role_grafts = [RoleGraft(role, graft) for role, graft in zip(roles, grafts)]
    prompts = chosen_prompts(list(session.prompts.values()), count, template, seed=0)

    def encoded_prompt(prompt) -> tuple:
        e = session.encode(prompt.text, prompt.target, prompt.id)
        return (prompt, e.input_ids, e.role_positions, e.unit_ids)

    # Encodings and the recipient's and donors' hits are kept per prompt (session.many_rows): a
    # request on prompts seen before runs only the graft's row of each.
    scored = [session.many_rows.get_or(("encoded", p.id), lambda p=p: encoded_prompt(p)) for p in prompts]

    def unit_logits(ids: list[int], rows: list, keep: int) -> torch.Tensor:
        with session.running():  # a prompt at a time: clicks get the lock in between
            batch = torch.tensor([ids]).expand(len(rows), -1)
            return session.grafter.logits(batch, row_grafts=rows, logits_to_keep=keep)

    out = score_prompts(unit_logits, scored, role_grafts, session.grid.donors, known=session.many_rows)
    return {
        **out,
        "positions": [g.positions for g in role_grafts],
        "template": template,
        "asked": count,
    }
