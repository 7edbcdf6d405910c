"""The built-in model family: world, tokenizer, pretrained model, datasets and four finetunes.

Finetunes: the relation model (SFT: the relation facts in both orders), the one-direction model
(the same facts in the B2A order only: the reversal task's recipient, which knows the format but
not the forward relation the evaluation asks), the task model (other facts, both orders) and the
free-text model (generated articles).

`ensure_builtin` builds what is missing under `home` and reuses the rest. Each step (world,
known facts, datasets, tokenizer and pretrained model, each finetune) is a step of the family's
ledger (`weightgraft.ledger`, `provenance.json`) with the fingerprint of its inputs: a finished
step is never redone, a step whose recipe or upstream outputs changed is rebuilt. Each step
writes its folders in temp folders renamed into place, so an interrupted one leaves nothing
half-written. A file lock lets concurrent callers share the work.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

from safetensors.torch import load_file

from weightgraft.data.build import check_no_leak, split_by_kind
from weightgraft.data.facts import generate_facts
from weightgraft.data.family import Member, write_family
from weightgraft.data.io import GENERATOR_VERSION, load_train_texts, write_dataset
from weightgraft.data.templates import EVAL_TEMPLATES, VALIDATION_TEMPLATES, eval_prompts_for
from weightgraft.data.world import World
from weightgraft.errors import warn
from weightgraft.folder_ownership import remove_entry
from weightgraft.ledger import Built, Ledger
from weightgraft.locking import waiting_lock
from weightgraft.runtime import home as runtime_home
from weightgraft.runtime import sha256_folder
from weightgraft.training import TRAINING_RECORD
from weightgraft.training.average import average_weights
from weightgraft.training.builtin_specs import (
    BUILTIN_VERSION,
    SPECS,
    TOKENS_PER_DOCUMENT,
    WORLD_VERSION,
    BuiltinSpec,
    Size,
)
from weightgraft.training.finetune import FinetuneConfig, finetune, transformers_bars
from weightgraft.training.pretrain import make_model, pack_documents, pretrain, save_model, train_steps
from weightgraft.training.shipped import FIRST_STEPS, find_shipped, state_probe, state_sha256, write_shipped
from weightgraft.training.tokenizer import train_bpe_tokenizer

LEDGER_NAME = "provenance.json"  # the build's ledger, in the family's folder


@dataclass
class BuiltinArtifacts:
    pretrained: Path
    relation_model: Path
    b2a_model: Path  # the one-direction model: the relation facts in the B2A order only
    task_model: Path
    freetext_model: Path
    relation_data: Path
    b2a_data: Path  # relation facts, B2A training texts; the same eval prompts as relation_data
    known_data: Path  # the world's real films (which PRE knows): eval prompts over all of them
    task_data: Path
    freetext_data: Path
    world_data: Path  # known films: facts, general text (train.jsonl), held-out films' prompts
    root: Path
    size: str = "default"
    seconds: dict[str, float] = field(default_factory=dict)  # time of each step built in this call


def default_home() -> Path:
    return runtime_home()


def build_world(spec: BuiltinSpec) -> World:
    return World(
        spec.seed,
        n_films=spec.n_films,
        n_first=spec.n_first,
        n_last=spec.n_last,
        n_background_films=spec.n_background_films,
    )


class _WorldOnce:
    """The world of a spec, built on first use: a call whose steps are all done never builds it."""

    def __init__(self, spec: BuiltinSpec):
        self.spec = spec
        self.world: World | None = None

    def get(self) -> World:
        if self.world is None:
            self.world = build_world(self.spec)
        return self.world


def write_world_dataset(world: World, directory: Path, general_docs: int) -> Path:
    """Known films as a dataset: general text to mix into finetuning, held-out films' prompts."""
    general = world.documents(general_docs, "general")
    evaluation = [p for f in world.heldout_films for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    validation = [p for f in world.heldout_films for p in eval_prompts_for(f, VALIDATION_TEMPLATES)]
    check_no_leak(general, evaluation + validation)
    return write_dataset(
        directory,
        world.films,
        general,
        validation,
        evaluation,
        world.seed,
        {"style": "world", "heldout_films": sorted(world.heldout_ids)},
    )


def write_known_dataset(world: World, directory: Path) -> Path:
    """The known-facts check: every world film (real films with their real leads, which the
    pretrained model read about) asked with the evaluation templates. No training text: it
    measures what a finetune kept. Films stated in evaluation wording during pretraining are
    listed as `exposed_films` in the manifest; the others were read only in articles."""
    evaluation = [p for f in world.films for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    return write_dataset(
        directory,
        world.films,
        [],
        [],
        evaluation,
        world.seed,
        {
            "style": "known",
            "heldout_films": sorted(world.heldout_ids),
            "exposed_films": sorted(f.id for f in world.exposed_films),
        },
    )


SET_NAMES = ("relation", "relation_a2b", "relation_b2a", "task", "freetext")  # what family_members writes


def family_members(spec: BuiltinSpec, world: World) -> list[Member]:
    """The finetuning sets: relation (with its one-direction sets), task and free-text, disjoint
    facts of the kinds `spec.set_kinds` asks for."""
    totals: dict[str, int] = {}
    for counts in spec.set_kinds.values():
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    facts = generate_facts(
        totals, spec.seed, world.pool, world.films, real_actors=world.actors, forbidden=world.person_names()
    )
    parts = split_by_kind(facts, spec.set_kinds)
    return [
        Member(
            "relation",
            parts["relation"],
            per_fact=spec.texts_per_fact,
            one_direction=True,
            title_free=spec.title_free_per_fact,
        ),
        Member("task", parts["task"], per_fact=spec.texts_per_fact, title_free=spec.title_free_per_fact),
        Member("freetext", parts["freetext"], "freetext", spec.articles_per_fact),
    ]


def _write_world(spec: BuiltinSpec, art: BuiltinArtifacts, worlds: _WorldOnce) -> None:
    write_world_dataset(worlds.get(), art.world_data, spec.general_docs)


def _write_known(art: BuiltinArtifacts, worlds: _WorldOnce) -> None:
    write_known_dataset(worlds.get(), art.known_data)


def _write_sets(spec: BuiltinSpec, art: BuiltinArtifacts, worlds: _WorldOnce) -> None:
    write_family(art.root / "data", family_members(spec, worlds.get()), spec.seed)


def pretraining_tokenizer(spec: BuiltinSpec, world: World):
    """The spec's tokenizer, trained on the world's documents (seconds; shipped weights need it too)."""
    return train_bpe_tokenizer(world.documents(spec.tokenizer_docs, "tokenizer"), spec.vocab_size)


def pretraining_documents(spec: BuiltinSpec, world: World) -> list[str]:
    """The documents the spec's pretraining reads: about its steps' tokens' worth."""
    cfg = spec.pretrain
    return world.documents(cfg.steps * cfg.batch_size * cfg.block_size // TOKENS_PER_DOCUMENT, "pretrain")


def first_steps_models(spec: BuiltinSpec, steps: Sequence[int] = (FIRST_STEPS,)) -> list:
    """The model after the spec's first `n` pretraining steps, for each `n` in `steps` (each from
    a fresh model; the world, tokenizer and documents are made once)."""
    world = build_world(spec)
    tokenizer = pretraining_tokenizer(spec, world)
    blocks = pack_documents(pretraining_documents(spec, world), tokenizer, spec.pretrain.block_size)
    models = []
    for n in steps:
        model = make_model(spec.pretrain, tokenizer)
        train_steps(model, blocks, spec.pretrain, n)
        models.append(model)
    return models


def first_steps_sha256(spec: BuiltinSpec, steps: int = FIRST_STEPS) -> str:
    """sha256 of the model after the spec's first `steps` pretraining steps (the shipped record's
    reproduction check on the machine that made it: equal means that the recipe still starts the
    shipped weights' run)."""
    return state_sha256(first_steps_models(spec, [steps])[0])


def _pretrain(
    spec: BuiltinSpec, art: BuiltinArtifacts, progress: bool, recipe: dict, shipped: bool, worlds: _WorldOnce
) -> None:
    """The tokenizer and the pretrained model, both trained on the world's documents; the model's
    weights come from the package (`training.shipped`) when `shipped` and they were made from
    this `recipe` (the step's), else it is pretrained here."""
    tokenizer = pretraining_tokenizer(spec, worlds.get())
    record = {"world_seed": spec.seed, "n_films": spec.n_films, "size": art.size, "vocab_size": spec.vocab_size}
    weights = find_shipped(art.size, recipe) if shipped else None
    if weights is None:
        docs = pretraining_documents(spec, worlds.get())
        pretrain(docs, tokenizer, spec.pretrain, art.pretrained, progress=progress, extra_record=record)
        return
    _say(art.size, progress, f"pretrained weights from the package ({weights.name})")
    model = make_model(spec.pretrain, tokenizer)
    model.load_state_dict(load_file(weights), strict=True)
    model.eval()
    record = {"kind": "pretrain", **asdict(spec.pretrain), **record, "weights": f"shipped: {weights.name}"}
    save_model(model, tokenizer, art.pretrained, record)


def _finetune(
    art: BuiltinArtifacts, config: FinetuneConfig, data: Path, out: Path, progress: bool, worlds: _WorldOnce
) -> None:
    """One finetune of the pretrained model (general text: the world's); needs no world itself."""
    finetune(art.pretrained, data, out, config, general_texts=load_train_texts(art.world_data), progress=progress)


def _average(members: list[Path], out: Path, worlds: _WorldOnce) -> None:
    """The model whose weights are the mean of `members`' (finished member steps)."""
    average_weights(members, out)


@dataclass(frozen=True)
class BuildStep:
    """One step of the built-in build, a step of its ledger: the folders it writes (each
    atomically), the recipe values its bytes depend on, the earlier steps whose outputs it reads
    (their fingerprints join its inputs), and the call that builds it from the world."""

    name: str
    outputs: tuple[Path, ...]
    recipe: dict
    after: tuple[str, ...]
    build: Callable[[_WorldOnce], None]


def builtin_steps(
    spec: BuiltinSpec, art: BuiltinArtifacts, progress: bool, finetunes: bool, shipped: bool = True
) -> list[BuildStep]:
    """The steps in the order they run; `finetunes=False` stops after the pretrained model;
    `shipped=False` pretrains even where the package ships the pretrained weights."""
    world = {
        "builtin": WORLD_VERSION,
        "size": art.size,
        "generator": GENERATOR_VERSION,
        "world": {k: getattr(spec, k) for k in ("seed", "n_films", "n_first", "n_last", "n_background_films")},
    }
    sets = {"set_kinds": spec.set_kinds, "texts_per_fact": spec.texts_per_fact, "articles": spec.articles_per_fact}
    if spec.title_free_per_fact:  # in the recipe only when used, as in the datasets' manifests
        sets["title_free_per_fact"] = spec.title_free_per_fact
    model = {"tokenizer_docs": spec.tokenizer_docs, "vocab_size": spec.vocab_size, "pretrain": asdict(spec.pretrain)}
    set_dirs = tuple(art.root / "data" / name for name in SET_NAMES)
    pretrained = world | model | {"tokens_per_document": TOKENS_PER_DOCUMENT}
    steps = [
        BuildStep(
            "world",
            (art.world_data,),
            world | {"general_docs": spec.general_docs},
            (),
            partial(_write_world, spec, art),
        ),
        BuildStep("known facts", (art.known_data,), world, (), partial(_write_known, art)),
        BuildStep("datasets", set_dirs, world | sets, (), partial(_write_sets, spec, art)),
        BuildStep(
            "pretrained model",
            (art.pretrained,),
            pretrained,
            (),
            partial(_pretrain, spec, art, progress, pretrained, shipped),
        ),
    ]
    if not finetunes:
        return steps
    after = ("world", "datasets", "pretrained model")
    for name, data, out, epochs, seeds in (
        ("relation model", art.relation_data, art.relation_model, spec.finetune.epochs, spec.averaged_seeds),
        ("one-direction (B2A) model", art.b2a_data, art.b2a_model, spec.b2a_epochs, spec.averaged_seeds),
        ("task model", art.task_data, art.task_model, spec.task_epochs, 1),
        ("free-text model", art.freetext_data, art.freetext_model, spec.freetext_epochs, 1),
    ):
        config = replace(spec.finetune, epochs=epochs)
        if seeds == 1:
            recipe = {"finetune": config.record(), "data": data.name}
            steps.append(BuildStep(name, (out,), recipe, after, partial(_finetune, art, config, data, out, progress)))
            continue
        # Each member is a step of its own, so an interrupted build keeps the members it finished.
        members = []
        for seed in range(config.seed, config.seed + seeds):
            member = replace(config, seed=seed)
            folder = art.root / "models" / "members" / f"{out.name}-seed{seed}"
            recipe = {"finetune": member.record(), "data": data.name}
            step = partial(_finetune, art, member, data, folder, progress)
            steps.append(BuildStep(f"{name}, seed {seed}", (folder,), recipe, after, step))
            members.append(steps[-1])
        recipe = {"average_of": [m.outputs[0].name for m in members]}
        average = partial(_average, [m.outputs[0] for m in members], out)
        steps.append(BuildStep(name, (out,), recipe, tuple(m.name for m in members), average))
    return steps


def _say(size: str, progress: bool, message: str) -> None:
    if progress:
        print(f"[weightgraft {size}] {message}", file=sys.stderr, flush=True)


def _step_inputs(ledger: Ledger, step: BuildStep) -> dict:
    """What a step's result depends on: its recipe and the fingerprints of what it reads."""
    return {"recipe": step.recipe, "after": {name: ledger.record_of(name)["outputs"] for name in step.after}}


def _fingerprints(step: BuildStep) -> dict:
    """A step's outputs as its record keeps them: each folder's sha256 (the training record,
    which holds times, left out), read by the steps after it."""
    return {"sha256": {path.name: sha256_folder(path, skip=(TRAINING_RECORD,)) for path in step.outputs}}


def _build(step: BuildStep, worlds: _WorldOnce) -> Built:
    step.build(worlds)
    return _fingerprints(step), list(step.outputs)


def run_step(ledger: Ledger, step: BuildStep, worlds: _WorldOnce, size: str, progress: bool) -> float | None:
    """Reuse `step` if its ledger record matches, else build it; the seconds it took, or None.

    A cache built before the ledger (no record, every output there: each was put in place whole)
    is adopted as done. Outputs of an unfinished or changed step are removed before it is rebuilt."""
    inputs = _step_inputs(ledger, step)
    if ledger.is_done(step.name, inputs):
        ledger.reuse(step.name)
        return None
    changed = ledger.changed_outputs(step.name) if ledger.record_of(step.name) is not None else []
    if changed:
        warn(f"{changed[0]} differs from the sha256 the build recorded for it (damaged); rebuilding the {step.name}")
    if ledger.record_of(step.name) is None and all(path.exists() for path in step.outputs):
        ledger.finish(step.name, inputs, _fingerprints(step), list(step.outputs), None)
        return None
    for path in step.outputs:
        remove_entry(path.parent, path.name)
    _say(size, progress, f"building {step.name} ...")
    record = ledger.run(step.name, inputs, partial(_build, step, worlds))
    _say(size, progress, f"{step.name} ready in {record['seconds']:.1f}s -> {step.outputs[0]}")
    return record["seconds"]


def builtin_artifacts(size: Size = "default", home: Path | None = None) -> BuiltinArtifacts:
    """Where the built-in family of `size` lives under `home` (nothing is built)."""
    if size not in SPECS:
        raise ValueError(f"unknown size {size!r}; use one of {sorted(SPECS)}")
    root = Path(home or default_home()) / f"builtin-{size}-v{BUILTIN_VERSION}"
    return BuiltinArtifacts(
        pretrained=root / "models" / "pretrained",
        relation_model=root / "models" / "relation",
        b2a_model=root / "models" / "relation_b2a",
        task_model=root / "models" / "task",
        freetext_model=root / "models" / "freetext",
        relation_data=root / "data" / "relation",
        b2a_data=root / "data" / "relation_b2a",
        known_data=root / "data" / "known",
        task_data=root / "data" / "task",
        freetext_data=root / "data" / "freetext",
        world_data=root / "data" / "world",
        root=root,
        size=size,
    )


def ensure_builtin(
    size: Size = "default",
    home: Path | None = None,
    progress: bool = True,
    finetunes: bool = True,
    shipped: bool = True,
) -> BuiltinArtifacts:
    """Build what is missing and return the paths; `finetunes=False` stops after the pretrained
    model and the datasets (the finetune paths are then returned but may not exist yet).

    `size`: "default" or "tiny" (`SPECS`). `home`: the cache folder (default: `default_home()`).
    `progress`: print each step built, and the trainers' progress, on stderr. `shipped`: take
    the pretrained weights from the package where they ship for this recipe (`training.shipped`);
    False pretrains here (the same bytes, much slower). The steps are
    recorded in `provenance.json` of the family's folder (`weightgraft.ledger`); concurrent
    callers wait for each other on a lock beside it, and the later one finds the work done."""
    art = builtin_artifacts(size, home)
    spec = SPECS[size]
    with waiting_lock(art.root.parent / f".builtin-{size}.lock"):
        art.root.mkdir(parents=True, exist_ok=True)
        ledger = Ledger(art.root / LEDGER_NAME, {"builtin": BUILTIN_VERSION, "size": size}, base=art.root)
        worlds = _WorldOnce(spec)
        with transformers_bars(progress):  # save_pretrained's bar too
            for step in builtin_steps(spec, art, progress, finetunes, shipped):
                seconds = run_step(ledger, step, worlds, size, progress)
                if seconds is not None:
                    art.seconds[step.name] = seconds
    return art


def ship_pretrained(size: Size, home: Path, folder: Path, progress: bool = True) -> Path:
    """Pretrain `size`'s model here (never from shipped weights) under `home` and write it, with
    its record, as the package's shipped weights into `folder` (`training/shipped/` to remake
    the package's file); the weights' path."""
    spec = SPECS[size]
    art = ensure_builtin(size, home, progress=progress, finetunes=False, shipped=False)
    step = next(s for s in builtin_steps(spec, art, False, False) if s.name == "pretrained model")
    first = first_steps_models(spec)[0]
    return write_shipped(art.pretrained, size, step.recipe, state_sha256(first), Path(folder), state_probe(first))
