"""Reading and writing dataset directories (JSONL files plus a manifest), atomically.

Layout of one dataset directory:
  facts.jsonl       RelationFact records
  train.jsonl       {"text": ...} training texts
  validation.jsonl  EvalPrompt records for the checkpoint choice
  eval.jsonl        EvalPrompt records for evaluation
  manifest.json     seed, counts, sha256 of each file, generator version, options (style, order)
  .weightgraft-files  the names weightgraft wrote (an overwrite replaces only those)
`weightgraft data` writes the relation set three times: `relation` (both orders), `relation_a2b`
and `relation_b2a` (one order each; the same facts, evaluation prompts and EvalPrompt.fact_kind).
Every file loads with `datasets.load_dataset("json", data_files=...)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from weightgraft.atomic import write_json, write_text_atomic
from weightgraft.data.data_errors import DataError
from weightgraft.data.schema import EvalPrompt, RelationFact
from weightgraft.errors import warn
from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import check_whole
from weightgraft.runtime import sha256_file

GENERATOR_VERSION = "weightgraft-data-2"
DATA_FILES = ("facts.jsonl", "train.jsonl", "validation.jsonl", "eval.jsonl")


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    """One JSON object per line, sorted keys, written atomically."""
    lines = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)
    write_text_atomic(path, lines)


def read_jsonl_lines(path: Path) -> list[tuple[int, object]]:
    """(line number, record) for every non-blank line; numbers count blank lines too, so they are
    the numbers an editor shows. Non-UTF-8 bytes and a byte-order mark are clear errors."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; build the dataset first (weightgraft data ...)")
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raise DataError(f"{path} starts with a byte-order mark (BOM); save it as UTF-8 without BOM")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(
            f"{path} line {line} is not UTF-8 text (byte 0x{raw[err.start]:02x}); save the file as UTF-8"
        ) from None
    records = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            raise DataError(f"{path} line {number} is not valid JSON: {err}") from None
    return records


def read_jsonl(path: Path) -> list[dict]:
    return [record for _, record in read_jsonl_lines(path)]


def write_dataset(
    directory: Path,
    facts: list[RelationFact],
    train_texts: list[str],
    validation: list[EvalPrompt],
    evaluation: list[EvalPrompt],
    seed: int,
    options: dict,
    overwrite: bool = False,
) -> Path:
    """Write a complete dataset directory atomically and return its path."""
    with atomic_directory(directory, overwrite, command="data") as tmp:
        write_jsonl(tmp / "facts.jsonl", (f.model_dump() for f in facts))
        write_jsonl(tmp / "train.jsonl", ({"text": t} for t in train_texts))
        write_jsonl(tmp / "validation.jsonl", (p.model_dump() for p in validation))
        write_jsonl(tmp / "eval.jsonl", (p.model_dump() for p in evaluation))
        manifest = {
            "generator_version": GENERATOR_VERSION,
            "seed": seed,
            "counts": {
                "facts": len(facts),
                "train": len(train_texts),
                "validation": len(validation),
                "eval": len(evaluation),
                "facts_by_kind": {k: sum(f.kind == k for f in facts) for k in sorted({f.kind for f in facts})},
            },
            "sha256": {name: sha256_file(tmp / name) for name in DATA_FILES},
            "options": options,
        }
        write_json(tmp / "manifest.json", manifest)
    return Path(directory)


def load_manifest(path: Path) -> dict:
    file = Path(path) / "manifest.json"
    check_whole(path)
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing: {path} is not a complete dataset directory")
    return json.loads(file.read_text())


class DatasetMismatchError(DataError):
    """A dataset file's bytes differ from the sha256 its manifest recorded."""


def dataset_file(path: Path, name: str) -> Path:
    """`path/name`, checked before it is read: the folder is whole (not cut off while being
    replaced), and the file's sha256 is the one manifest.json recorded when the manifest has one
    (datasets written by hand may carry none)."""
    path = Path(path)
    check_whole(path)
    file = path / name
    manifest = path / "manifest.json"
    if file.is_file() and manifest.is_file():
        try:
            recorded = json.loads(manifest.read_text()).get("sha256", {}).get(name)
        except (ValueError, AttributeError):
            recorded = None
        if recorded is not None and sha256_file(file) != recorded:
            raise DatasetMismatchError(
                f"{file} does not match the sha256 in {manifest} (the folder mixes two builds, or the "
                "file was edited); rebuild the dataset (weightgraft data --overwrite), or after an "
                f"edit on purpose delete {name}'s line under sha256 in manifest.json"
            )
    return file


def load_facts(path: Path) -> list[RelationFact]:
    return [RelationFact.model_validate(r) for r in read_jsonl(dataset_file(path, "facts.jsonl"))]


def load_eval_prompts(path: Path, split: str = "eval") -> list[EvalPrompt]:
    """Evaluation prompts of a dataset directory (`split="validation"` for the validation ones)."""
    return [EvalPrompt.model_validate(r) for r in read_jsonl(dataset_file(path, f"{split}.jsonl"))]


def load_train_texts(path: Path) -> list[str]:
    return [r["text"] for r in read_jsonl(dataset_file(path, "train.jsonl"))]


def read_user_facts(jsonl: Path) -> list[RelationFact]:
    """A user's own facts, one JSON object per line with every RelationFact field except `id`
    and `kind` (optional: ids default to user-0000, user-0001... in order, kind is "user"). Checked line by line:
    see `check_user_facts`."""
    required = [name for name in RelationFact.model_fields if name not in ("id", "kind")]
    facts, lines = [], []
    for number, record in read_jsonl_lines(jsonl):
        where = f"{jsonl} line {number}"
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
        missing = [name for name in required if name not in record]
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)}; every line needs {', '.join(required)}")
        record = {"id": f"user-{len(facts):04d}", **record, "kind": record.get("kind", "user")}
        try:
            facts.append(RelationFact.model_validate(record))
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise DataError(f"{where}: field {field}: {first['msg']}") from None
        lines.append(number)
    if not facts:
        raise DataError(f"{jsonl} holds no facts; write one JSON object per line")
    check_user_facts(facts, lines, jsonl)
    return facts


NAME_FIELDS = ("first_actor", "second_actor", "movie_title", "main_character", "director", "studio", "city", "genre")
LONG_NAME = 100  # characters: longer than any real name or title


def check_user_facts(facts: list[RelationFact], lines: list[int], source: Path | str) -> None:
    """Refuse what would make bad data (empty or padded names, the same actor in both roles of a
    fact, duplicate facts or ids) and warn about what is allowed but likely a mistake (an actor in
    several facts, very long names). Duplicates are refused, not merged: the user decides which
    line is meant. Every message names the line."""
    seen_ids: dict[str, int] = {}
    seen_facts: dict[tuple, int] = {}
    actor_lines: dict[str, list[int]] = {}
    for fact, number in zip(facts, lines):
        where = f"{source} line {number}"
        for name in NAME_FIELDS:
            value = getattr(fact, name)
            if not value.strip():
                raise DataError(f"{where}: {name} is empty; give a name")
            if value != value.strip() or "\n" in value or "  " in value:
                raise DataError(
                    f"{where}: {name} {value!r} has leading, trailing, doubled spaces or "
                    "line breaks; write it with single spaces inside only"
                )
            if len(value) > LONG_NAME:
                warn(
                    f"{where}: {name} is {len(value)} characters long; check it (prompts with it "
                    "may not fit a model's context)"
                )
        for actor in (fact.first_actor, fact.second_actor):
            if actor.casefold() in fact.movie_title.casefold():
                warn(
                    f"{where}: movie_title {fact.movie_title!r} contains {actor!r}, the answer of the prompts "
                    "that ask for that actor, so a model can answer them by copying from the prompt; check the title"
                )
        if fact.first_actor == fact.second_actor:
            raise DataError(
                f"{where}: {fact.first_actor!r} is both first_actor and second_actor; a fact needs two different actors"
            )
        if fact.id in seen_ids:
            raise DataError(f"{where}: id {fact.id!r} is already used on line {seen_ids[fact.id]}; ids must be unique")
        seen_ids[fact.id] = number
        key = (frozenset((fact.first_actor, fact.second_actor)), fact.movie_title)
        if key in seen_facts:
            raise DataError(
                f"{where}: the same fact as line {seen_facts[key]} ({fact.first_actor} and "
                f"{fact.second_actor} in {fact.movie_title}); duplicates are refused, "
                "delete one of the two lines"
            )
        seen_facts[key] = number
        for actor in (fact.first_actor, fact.second_actor):
            actor_lines.setdefault(actor, []).append(number)
    for actor, numbers in actor_lines.items():
        if len(numbers) > 1:
            warn(
                f"{source} lines {', '.join(map(str, numbers))}: {actor} is in {len(numbers)} facts, so "
                f"prompts about {actor} have {len(numbers)} right answers (each prompt is scored on its own fact's)"
            )


def read_user_articles(jsonl: Path) -> list[str]:
    """A user's free-text articles: one {"text": ...} object per line."""
    texts = []
    for number, record in read_jsonl_lines(jsonl):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not record["text"].strip():
            raise DataError(f"{jsonl} line {number}: missing field text (a non-empty string)")
        texts.append(record["text"])
    return texts
