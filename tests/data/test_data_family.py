"""The dataset family is written in one place (`data/family.py`) for its three callers:
`weightgraft data`, the built-in build and `weightgraft reproduce`. Each caller goes through
`write_family`, and its files are byte for byte what `build_dataset` writes when called directly
under the family's rule (member i with seed + i, one-direction siblings with their member's seed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from cli_runner import invoke
from weightgraft.data import family
from weightgraft.data.build import build_dataset, split_by_kind, split_disjoint
from weightgraft.data.facts import generate_facts, known_film_facts
from weightgraft.data.family import Member, write_family
from weightgraft.data.names import NamePool
from weightgraft.pipelines import reproduce as reproduce_pipeline
from weightgraft.training import builtin, builtin_specs


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def datasets_of(folder: Path, names) -> dict[str, bytes]:
    """The data files of the named dataset directories (not the folder's own records)."""
    return {f"{name}/{k}": v for name in names for k, v in files_of(folder / name).items()}


@pytest.fixture
def family_calls(monkeypatch):
    """The members each `write_family` call wrote, in order (to see that a caller used it)."""
    calls: list[list[str]] = []
    real = family.write_family

    def spy(directory, members, seed):
        calls.append([m.name for m in members])
        return real(directory, members, seed)

    monkeypatch.setattr(family, "write_family", spy)
    monkeypatch.setattr(builtin, "write_family", spy)  # imported at its module's top
    monkeypatch.setattr(reproduce_pipeline, "write_family", spy)  # and here too
    return calls


def test_the_cli_family_matches_build_dataset_called_directly(tmp_path, family_calls):
    out = tmp_path / "cli"
    args = ["--seed", "3", "--relation", "9", "--task", "7", "--freetext", "5", "--known", "4"]
    outcome = invoke(
        "data", "--out", out, *args, "--facts-per-kind", 10, "--texts-per-fact", 6, "--articles-per-fact", 3
    )
    assert outcome.code == 0, outcome.lines
    assert family_calls == [["relation", "task", "freetext", "known"]]
    pool = NamePool(3)
    known = known_film_facts(3, pool)
    facts = generate_facts({k: 10 for k in ("fake_fake", "fake_real", "real_shuffled")}, 3, pool, known)
    parts = split_disjoint(facts, {"relation": 9, "task": 7, "freetext": 5})
    ref = tmp_path / "ref"
    for order, name in (("both", "relation"), ("a2b", "relation_a2b"), ("b2a", "relation_b2a")):
        build_dataset(ref / name, parts["relation"], 3, "templates", 6, order=order)
    build_dataset(ref / "task", parts["task"], 4, "templates", 6)
    build_dataset(ref / "freetext", parts["freetext"], 5, "freetext", 3)
    build_dataset(ref / "known", known[:4], 6, "templates", 6)
    names = ["relation", "relation_a2b", "relation_b2a", "task", "freetext", "known"]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(names)
    assert datasets_of(out, names) == datasets_of(ref, names)


def test_the_builtin_family_matches_build_dataset_called_directly(tmp_path, family_calls):
    spec = builtin_specs.SPECS["tiny"]
    world = builtin.build_world(spec)
    art = builtin.builtin_artifacts("tiny", tmp_path / "home")
    builtin._write_sets(spec, art, SimpleNamespace(get=lambda: world))
    assert family_calls == [["relation", "task", "freetext"]]
    totals: dict[str, int] = {}
    for counts in spec.set_kinds.values():
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    facts = generate_facts(totals, 0, world.pool, world.films, real_actors=world.actors, forbidden=world.person_names())
    parts = split_by_kind(facts, spec.set_kinds)
    ref = tmp_path / "ref"
    for order, name in (("both", "relation"), ("a2b", "relation_a2b"), ("b2a", "relation_b2a")):
        build_dataset(ref / name, parts["relation"], 0, "templates", spec.texts_per_fact, order=order)
    build_dataset(ref / "task", parts["task"], 1, "templates", spec.texts_per_fact)
    build_dataset(ref / "freetext", parts["freetext"], 2, "freetext", spec.articles_per_fact)
    assert datasets_of(art.root / "data", builtin.SET_NAMES) == datasets_of(ref, builtin.SET_NAMES)


def test_the_reproduce_family_matches_build_dataset_called_directly(tmp_path, monkeypatch, family_calls):
    from weightgraft.paper import reproduce_job as job_plan
    from weightgraft.pipelines import reproduce as rp

    monkeypatch.setattr(job_plan, "_check_tokenizer", lambda model: None)  # no model is read to plan the data
    options = job_plan.ReproduceOptions(model="m", out=tmp_path / "job", facts=8, datasets=("FMRA", "FMFA"), seed=2)
    job = job_plan.plan_job(options)
    outputs, _ = rp.Pipeline.build_datasets(SimpleNamespace(recipe=job.recipe, job=job, out=job.recipe.out))
    keys = ["known", "FMRA", "FMRA_b2a", "FMRA_half_a", "FMRA_half_b", "FMFA"]
    assert family_calls == [keys] and list(outputs) == keys
    pool = NamePool(2)
    known = known_film_facts(2, pool)
    fmra = generate_facts({"fake_real": 8}, 2, pool, known)
    fmfa = generate_facts({"fake_fake": 8}, 3, pool, known)
    ref = tmp_path / "ref"
    build_dataset(ref / "known", known[: job.sets["known"].n_facts], 2, "templates", 22)
    build_dataset(ref / "FMRA", fmra, 3, "templates", 22)
    build_dataset(ref / "FMRA_b2a", fmra, 4, "templates", 11, order="b2a")
    build_dataset(ref / "FMRA_half_a", fmra[:4], 5, "templates", 22)
    build_dataset(ref / "FMRA_half_b", fmra[4:], 6, "templates", 22)
    build_dataset(ref / "FMFA", fmfa, 7, "templates", 22)
    assert datasets_of(options.out / "data", keys) == datasets_of(ref, keys)


def test_a_family_naming_a_directory_twice_is_refused_before_writing(tmp_path):
    pool = NamePool(0)
    facts = generate_facts({"fake_fake": 4}, 0, pool, known_film_facts(0, pool))
    members = [Member("relation", facts, per_fact=4, one_direction=True), Member("relation_b2a", facts, per_fact=4)]
    with pytest.raises(ValueError, match="twice"):
        write_family(tmp_path / "out", members, 0)
    assert not (tmp_path / "out").exists()
