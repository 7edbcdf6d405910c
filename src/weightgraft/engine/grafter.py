"""`Grafter`: run a recipient model with donors' weights at chosen positions, in one pass."""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Literal

import torch
from torch import nn

from weightgraft.adapters import adapter_for
from weightgraft.adapters.coverage import uncovered_parameters
from weightgraft.donors import DonorSource
from weightgraft.donors.placement import execution_device
from weightgraft.engine.compat import check_compatible
from weightgraft.engine.decoding import cache_argument, check_generation_settings, eos_id_set, next_token
from weightgraft.engine.graft import Graft, Key, as_graft_list
from weightgraft.engine.graft_index import GraftIndex
from weightgraft.engine.graft_masks import (
    GraftMasks,
    mask_classes,
    refuse_overlaps,
    resolve_partials,
    row_graft_lists,
)
from weightgraft.engine.history import grafts_history, history_keys, refuse_history_generation
from weightgraft.engine.hooks import Splice, SpliceHooks, module_layouts
from weightgraft.engine.inputs import call_inputs, last_real_index, position_ids
from weightgraft.engine.layer_memo import LayerMemo, remembered
from weightgraft.engine.layer_sharing import BEFORE_THE_LAYERS, LayerGroups, SharedLayers, plan_layer_groups
from weightgraft.engine.named_donors import named_donors
from weightgraft.engine.sharing import plan_segments
from weightgraft.engine.splice_plan import plan_splices
from weightgraft.engine.units import UnitColumns, UnitSpec, check_units, unit_columns, unit_specs
from weightgraft.engine.views import GrafterViews

RowGrafts = Sequence[Graft | Sequence[Graft] | None]

# Attention implementations whose masks are plain per-row tensors (see _shares_layers).
LAYER_SHARING_ATTENTION = (None, "eager", "sdpa", "flash_attention_2", "flash_attention_3")


class Grafter(GrafterViews):
    """Dynamic weight grafting of one or more donors into `recipient`.

    `Grafter(recipient, donor)` grafts one donor; `Grafter(recipient, donors={"sft": m1, "task":
    m2})` several, and each `Graft` names its donor (`Graft(..., donor="task")`). A donor is a
    model or any `weightgraft.donors.DonorSource`.

    Neither model is modified: grafting works through forward hooks that replace the recipient
    modules' outputs at grafted rows with the donor modules' outputs on the same inputs.
    Swapping the two models grafts in the reverse direction.

    Every donor must match the recipient in architecture, parameter shapes, dtypes and device, and
    in every config field that changes the computation; `allow_config_differences` names config
    fields that may differ (for users who mean it, e.g. `("rope_theta",)`).

    Rows that agree on their inputs and grafts up to some position share that stretch's
    computation through the KV cache, and rows that agree on everything below some layer share
    those layers (a layer sweep); `share_prefixes=False` runs every row in full (results then do
    not depend on what else is in the batch).

    Args:
        recipient: the model that runs; never modified.
        donor: the one donor (a model, checkpoint folder, LoRA adapter or `DonorSource`).
        donors: several donors by name, in place of `donor`.
        share_prefixes: share rows' common prefixes and layers (results equal to ~1e-6).
        allow_config_differences: config fields the donors may differ in.

    Raises:
        ValueError: a donor that does not fit the recipient; an adapter that leaves parameters out.
        TypeError: no donor, or several donors not given by keyword.
    """

    def __init__(
        self,
        recipient: nn.Module,
        donor: object | None = None,
        *,
        donors: Mapping[str, object] | None = None,
        share_prefixes: bool = True,
        allow_config_differences: Collection[str] = (),
    ):
        if isinstance(allow_config_differences, str):
            allow_config_differences = (allow_config_differences,)
        self.donors: dict[str, DonorSource] = named_donors(donor, donors, recipient)
        self.donor_names = list(self.donors)
        for name, source in self.donors.items():
            check_compatible(recipient, source, name, allow_config_differences)
        self.recipient = recipient
        self.share_prefixes = share_prefixes
        self.adapter = adapter_for(recipient)
        uncovered = uncovered_parameters(recipient, self.adapter)
        if uncovered:
            raise ValueError(
                f"the {self.adapter.model_types[0]} adapter does not cover parameters {uncovered[:8]}"
                f"{' ...' if len(uncovered) > 8 else ''}; extend the adapter so that 'all' means every parameter"
            )
        self.num_layers = len(self.adapter.decoder_layers(recipient))
        # Every (layer, component) key, the modules each is computed by, their layers (graft_index).
        self.index = GraftIndex.build(self.adapter, self.num_layers, recipient.config, self.device)
        self.keys: list[Key] = self.index.keys
        self._history = history_keys(self.adapter, self.index.targets)  # engine.history
        self._units: dict[str, UnitSpec] | None = None
        self._unit_columns: dict[tuple[int, frozenset, str], UnitColumns] = {}
        self._cache_name = cache_argument(recipient)  # read once, not on every pass
        self._layer_memo: LayerMemo | None = None  # remember_layers()
        # For layer sharing: the masks (all donors') of what acts before layer 0, and of each layer.
        every = [(d * len(self.keys) + k, key) for d in range(len(self.donors)) for k, key in enumerate(self.keys)]
        self._keys_before = [i for i, (layer, comp) in every if layer is None and comp in BEFORE_THE_LAYERS]
        self._keys_of_layer = [[i for i, (layer, _) in every if layer == n] for n in range(self.num_layers)]
        self._seq_dims, self._call_forms = module_layouts(self.adapter, self.num_layers)
        # Per Graft object, the keys it covers (and with which units); gone with their Graft.
        self._graft_keys: weakref.WeakKeyDictionary[Graft, torch.Tensor] = weakref.WeakKeyDictionary()
        self._graft_units: weakref.WeakKeyDictionary[Graft, frozenset | None] = weakref.WeakKeyDictionary()

    @property
    def components(self) -> list[str]:
        """Canonical component names this model has (groups attn, mlp, norms, all also apply)."""
        return list(self.adapter.components)

    @property
    def units(self) -> dict[str, UnitSpec]:
        """How each head and neuron component divides into units (read when first needed)."""
        if self._units is None:
            config = self.recipient.config
            splits = {path: rule(config) for path, rule in self.adapter.splits.items()}
            self._units = unit_specs(self.adapter, self.recipient, splits)
        return self._units

    @property
    def device(self) -> torch.device:
        """Where inputs go: the recipient's device, or for a model that accelerate spread or
        offloaded (`device_map=...`), where its forward starts."""
        return execution_device(self.recipient, "")

    @property
    def changed_components(self) -> list[str]:
        """Components that some donor changes; grafting any other component has no effect.
        Every component for a full or lazy donor; an adapter's target modules for an adapter."""
        changed = set()
        for source in self.donors.values():
            paths = source.changed_paths() if hasattr(source, "changed_paths") else set(self.index.targets)
            changed |= {self.keys[k][1] for path in paths for k, _ in self.index.targets.get(path, [])}
        return [c for c in self.components if c in changed]

    def identical_keys(self, donor: str) -> list[tuple[int | None, str]]:
        """(layer, component) keys whose weights in `donor` equal the recipient's bit for bit:
        grafting them changes nothing. A part of a fused matrix counts only when the whole module
        is identical (never a false "identical"). Reads every donor module once (lazy donors too)."""
        source = self.donors[donor]
        same, differ = set(), set()
        for path, served in self.index.targets.items():
            mine = dict(self.recipient.get_submodule(path).named_parameters())
            theirs = dict(source.module(path).named_parameters())
            equal = mine.keys() == theirs.keys() and all(
                torch.equal(mine[n].detach(), theirs[n].detach().to(mine[n].device)) for n in mine
            )
            (same if equal else differ).update(self.keys[k] for k, _ in served)
        return [key for key in self.keys if key in same and key not in differ]  # a chain: all its modules

    def prefetch(self, grafts: Graft | Sequence[Graft]) -> None:
        """Load the donor modules these grafts need now (lazy donors read their tensors)."""
        for graft in as_graft_list(grafts):
            source = self.donors[self.donor_names[self._donor_index(graft)]]
            keys = set(self._keys_of(graft).nonzero().flatten().tolist())
            for path, served in self.index.targets.items():
                if any(k in keys for k, _ in served):
                    source.module(path)

    def release(self) -> None:
        """Free what lazy and adapter donors loaded; later calls load it again."""
        for source in self.donors.values():
            if hasattr(source, "release"):
                source.release()

    # --- public API -------------------------------------------------------------------------
    def logits(
        self,
        input_ids: torch.Tensor,
        grafts: Graft | Sequence[Graft] | None = None,
        row_grafts: RowGrafts | None = None,
        attention_mask: torch.Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        """Logits `[batch, seq, vocab]` of the recipient with the grafts applied.

        `logits_to_keep=N` returns only the last N positions' logits, `[batch, N, vocab]` (0: all),
        as in transformers: the unembedding, often the largest matrix, then runs on N positions.
        """
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
            raise ValueError(f"logits_to_keep must be an int >= 0 (0: every position), not {logits_to_keep!r}")
        ids, mask, roles = call_inputs(input_ids, attention_mask, self.device)
        grafted = self._graft_masks(grafts, row_grafts, mask, roles)
        return self._forward(ids, mask, grafted, keep=min(logits_to_keep, ids.shape[1]))

    def last_logits(
        self,
        input_ids: torch.Tensor,
        grafts: Graft | Sequence[Graft] | None = None,
        row_grafts: RowGrafts | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits `[batch, vocab]` at each row's last real token: the next-token prediction."""
        ids, mask, roles = call_inputs(input_ids, attention_mask, self.device)
        grafted = self._graft_masks(grafts, row_grafts, mask, roles)
        left_aligned = bool(mask[:, -1].all())
        logits = self._forward(ids, mask, grafted, keep=1 if left_aligned else 0)
        if left_aligned:
            return logits[:, -1]
        last = last_real_index(mask)
        return logits[torch.arange(ids.shape[0], device=ids.device), last]

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        grafts: Graft | Sequence[Graft] | None = None,
        row_grafts: RowGrafts | None = None,
        attention_mask: torch.Tensor | None = None,
        max_new_tokens: int = 20,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        generated: Literal["none", "last"] = "none",
    ) -> torch.Tensor:
        """Generate with the KV cache; prompt positions are grafted as given.

        Generated tokens get nothing grafted (`generated="none"`, the recipient computes them), or
        the same grafts as their row's last prompt token (`generated="last"`).
        """
        check_generation_settings(max_new_tokens, do_sample, temperature, top_k, top_p, generated)
        ids, mask, roles = call_inputs(input_ids, attention_mask, self.device)
        if not bool(mask[:, -1].all()):
            raise ValueError("generate needs left-padded prompts: set tokenizer.padding_side = 'left'")
        grafted = self._graft_masks(grafts, row_grafts, mask, roles)
        if grafts_history(grafted, self._history, len(self.keys), len(self.donors)):
            refuse_history_generation(sorted({self.keys[k][1] for k in self._history}))
        step = grafted.last_column() if generated == "last" else grafted.nothing_at_last_column()
        eos = eos_id_set(eos_token_id if eos_token_id is not None else self._config_eos())
        pad = pad_token_id if pad_token_id is not None else (min(eos) if eos else 0)
        eos_ids = torch.tensor(sorted(eos), dtype=torch.long, device=ids.device)
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        out = ids
        with self._running(grafted) as (hooks, _):
            logits, cache = self._pass(hooks, ids, mask, grafted, None, keep=1)
            step_splices = self._splices(step, hooks.paths, keep=1)  # the same for every step
            for _ in range(max_new_tokens):
                token = next_token(logits[:, -1].float(), do_sample, temperature, top_k, top_p, generator)
                token = torch.where(done, torch.full_like(token, pad), token)
                out = torch.cat([out, token[:, None]], dim=1)
                done |= torch.isin(token, eos_ids)
                if bool(done.all()):
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                logits, cache = self._pass(hooks, token[:, None], mask, step, cache, keep=1, splices=step_splices)
        return out

    # --- where each graft goes ----------------------------------------------------------------
    def _keys_of(self, graft: Graft) -> torch.Tensor:
        """Bool [num_keys]: which (layer, component) keys a graft covers (cached per Graft)."""
        selected = self._graft_keys.get(graft)
        if selected is None:
            keys = graft.keys(self.adapter, self.num_layers)
            selected = torch.zeros(len(self.keys), dtype=torch.bool)
            selected[[self.index.key_index[k] for k in keys]] = True
            self._graft_keys[graft] = selected
            self._graft_units[graft] = self._units_of(graft, sorted({c for _, c in keys}))
        return selected

    def _units_of(self, graft: Graft, components: list[str]) -> frozenset | None:
        """The heads or neurons a graft narrows its keys to; None when it grafts them whole (no
        units given, or every unit of every component it names)."""
        if graft.units is None:
            return None
        _, units = graft.units
        check_units(units, components, self.units, self.adapter.model_types[0])
        if all(len(units) == self.units[c].count for c in components):
            return None
        return frozenset(units)

    def _partial_columns(self, key: int, units: frozenset, path: str | None = None) -> UnitColumns:
        """(output columns, input columns, experts) of a key's module at `path` (default: its last)
        that `units` of the key cover; a per-channel module before a chain's last gives its output
        columns the last module reads as those units' inputs."""
        path = path or self.index.key_target[key][0]
        found = self._unit_columns.get((key, units, path))
        if found is None:
            spec = self.units[self.keys[key][1]]
            if path == self.index.key_target[key][0]:
                found = unit_columns(spec, self.index.key_target[key][1], units, self.device)
            else:
                found = (spec.columns(units).to(self.device), None, None)
            self._unit_columns[(key, units, path)] = found
        return found

    def _donor_index(self, graft: Graft) -> int:
        if graft.donor is None:
            if len(self.donor_names) == 1:
                return 0
            raise ValueError(
                f"{graft!r} names no donor, but this Grafter has several: {self.donor_names}; "
                "pass Graft(..., donor=NAME)"
            )
        if graft.donor not in self.donors:
            raise ValueError(f"{graft!r} names donor {graft.donor!r}; this Grafter's donors are {self.donor_names}")
        return self.donor_names.index(graft.donor)

    def _graft_masks(self, grafts, row_grafts, mask: torch.Tensor, roles=None) -> GraftMasks:
        """Where each (layer, component) computes with each donor, for every row and position
        (`roles`: each row's token roles, for role positions such as "FE+LT")."""
        batch, seq = mask.shape
        per_row = row_graft_lists(grafts, row_grafts, batch)
        num_keys = len(self.keys)
        out = torch.zeros(len(self.donors) * num_keys, batch, seq, dtype=torch.bool)
        real_positions = [row.nonzero().squeeze(-1) for row in mask.cpu()]
        # (donor, key) -> unit set -> where grafted with those units only
        partial: dict[tuple[int, int], dict[frozenset, torch.Tensor]] = {}
        for b, row in enumerate(per_row):
            for graft in row:
                d = self._donor_index(graft)
                keys = self._keys_of(graft).nonzero().squeeze(-1)
                found = graft.position_indices(len(real_positions[b]), None if roles is None else roles[b])
                positions = real_positions[b][found]
                if not (keys.numel() and positions.numel()):
                    continue
                units = self._graft_units[graft]
                if units is None:
                    out[keys[:, None] + d * num_keys, b, positions[None, :]] = True
                    continue
                for k in keys.tolist():
                    where = partial.setdefault((d, k), {}).setdefault(units, torch.zeros(batch, seq, dtype=torch.bool))
                    where[b, positions] = True
        partials, partial_masks = resolve_partials(partial, out, num_keys, lambda k: self.units[self.keys[k][1]].count)
        if len(self.donors) > 1:
            anywhere = out.clone()
            for (d, k, _), where in zip(partials, partial_masks):
                anywhere[d * num_keys + k] |= where
            refuse_overlaps(
                anywhere.view(len(self.donors), num_keys, batch, seq), real_positions, self.keys, self.donor_names
            )
        if partials:
            out = torch.cat([out, torch.stack(partial_masks)])
        return GraftMasks(out.to(mask.device), mask_classes(out), partials)

    # --- running --------------------------------------------------------------------------------
    @contextmanager
    def _running(self, grafted: GraftMasks) -> Iterator[tuple[SpliceHooks, SharedLayers]]:
        """Eval mode, no grad, hooks on the modules that are grafted anywhere in this call, and the
        decoder layers ready to run on shared rows."""
        num_keys = len(self.keys)
        sources = list(self.donors.values())
        donor_modules: dict[str, dict[int, nn.Module]] = {}
        base = len(sources) * num_keys
        for path, served in self.index.targets.items():
            used = [d for d in range(len(sources)) if any(grafted.classes[d * num_keys + k] >= 0 for k, _ in served)]
            used += [
                d
                for i, (d, k, _) in enumerate(grafted.partials)
                if grafted.classes[base + i] >= 0 and path in self.index.key_paths[k] and d not in used
            ]
            if used:
                donor_modules[path] = {d: sources[d].module(path) for d in used}
        hooks = SpliceHooks(self.recipient, donor_modules, self._seq_dims, self._call_forms)
        layers = SharedLayers(self.adapter.decoder_layers(self.recipient))
        was_training = self.recipient.training
        self.recipient.eval()
        try:
            with ExitStack() as stack:
                for source in sources:
                    stack.enter_context(source.running())
                stack.enter_context(torch.no_grad())
                stack.enter_context(hooks.installed())
                if self._shares_layers():
                    stack.enter_context(layers.installed())
                yield hooks, layers
        finally:
            self.recipient.train(was_training)

    def _splices(
        self, chunk: GraftMasks, paths: list[str], keep: int, groups: Sequence[LayerGroups] = ()
    ) -> dict[str, list[Splice]]:
        """This chunk's splices per hooked module (`splice_plan.plan_splices`), on this Grafter's
        modules and donors."""
        return plan_splices(chunk, paths, keep, groups, self.index, len(self.donors), self._partial_columns)

    def _pass(
        self, hooks: SpliceHooks, ids, mask, chunk: GraftMasks, cache, keep: int, splices=None, shared=None, groups=()
    ):
        """One forward over `ids` (the chunk after the cached prefix), grafted by `chunk`; logits
        for the last `keep` positions (0: all). `groups`: the shared rows of the first layers."""
        past = 0 if cache is None else cache.get_seq_length()
        positions = position_ids(mask)[:, past : past + ids.shape[1]]
        hooks.current = self._splices(chunk, hooks.paths, keep, groups) if splices is None else splices
        if shared is not None:
            shared.groups = list(groups)
        name = self._cache_name
        out = self.recipient(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=keep,
            **{name: cache},
        )
        return out.logits, getattr(out, name)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, grafted: GraftMasks, keep: int) -> torch.Tensor:
        """Logits of the last `keep` positions (0: all), segment by segment when rows share."""
        cached = self.share_prefixes and not grafts_history(grafted, self._history, len(self.keys), len(self.donors))
        segments = plan_segments(ids, mask, grafted.masks) if cached else None

        def layer_groups(rows, end: int) -> list[LayerGroups]:
            if not self._shares_layers():
                return []
            seen = grafted.masks[:, rows, :end] if rows is not None else grafted.masks
            picked = (ids, mask) if rows is None else (ids[rows, :end], mask[rows, :end])
            return plan_layer_groups(*picked, seen, self._keys_before, keys_of_layer)

        keys_of_layer = [list(keys) for keys in self._keys_of_layer]
        base = len(self.donors) * len(self.keys)
        for i, (_, k, _) in enumerate(grafted.partials):
            keys_of_layer[self.keys[k][0]].append(base + i)

        with self._running(grafted) as (hooks, shared):
            if segments is None:
                groups = layer_groups(None, ids.shape[1])
                with remembered(self._layer_memo, ids, mask, grafted, self._keys_before, keys_of_layer):
                    logits, _ = self._pass(hooks, ids, mask, grafted, None, keep, shared=shared, groups=groups)
                return logits
            first_kept = ids.shape[1] - keep if keep else 0
            pieces, cache = [], None
            for seg in segments:
                if cache is not None:
                    cache.reorder_cache(seg.parent)
                # A segment before the kept positions still needs its cache; one position's logits
                # (transformers has no "none") are computed and dropped.
                wanted = seg.end - max(seg.start, first_kept)
                logits, cache = self._pass(
                    hooks,
                    ids[seg.rows, seg.start : seg.end],
                    mask[seg.rows, : seg.end],
                    grafted.chunk(seg.rows, seg.start, seg.end),
                    cache,
                    max(wanted, 1) if keep else 0,
                    shared=shared,
                    groups=layer_groups(seg.rows, seg.end),
                )
                if wanted > 0:
                    pieces.append(logits[seg.row_to_history])
            return torch.cat(pieces, dim=1)

    def remember_layers(self, calls: int = 8) -> None:
        """Reuse the last `calls` passes' layer outputs where a pass shares its tokens and grafts up
        to a layer (`layer_memo`; same logits bit for bit; for weights that do not change)."""
        self._layer_memo = LayerMemo(self.adapter.decoder_layers(self.recipient), calls)

    def _shares_layers(self) -> bool:
        """Layer sharing slices a layer's per-row arguments, which it knows as tensors; flex
        attention passes a block mask object it cannot slice, so there layers run in full."""
        attention = getattr(self.recipient.config, "_attn_implementation", None)
        return self.share_prefixes and attention in LAYER_SHARING_ATTENTION

    def _config_eos(self) -> int | list[int] | None:
        gen = getattr(self.recipient, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        return eos if eos is not None else getattr(self.recipient.config, "eos_token_id", None)
