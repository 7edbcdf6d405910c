"""Reading and writing dataset directories (JSONL files plus a manifest), atomically.

Layout of one dataset directory:
  facts.jsonl       RelationFact records
  train.jsonl       {"text": ...} training texts
  validation.jsonl  EvalPrompt records for the checkpoint choice
  eval.jsonl        EvalPrompt records for evaluation
  manifest.json     seed, counts, sha256 of each file, generator version, options
Every file loads with `datasets.load_dataset("json", data_files=...)`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from weightgraft.atomic import write_text_atomic
from weightgraft.data.schema import EvalPrompt, RelationFact

GENERATOR_VERSION = "weightgraft-data-2"
DATA_FILES = ("facts.jsonl", "train.jsonl", "validation.jsonl", "eval.jsonl")


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    """One JSON object per line, sorted keys, written atomically."""
    lines = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)
    write_text_atomic(path, lines)


def write_json(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; build the dataset first (weightgraft data ...)")
    records = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} line {number} is not valid JSON: {err}") from None
    return records


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@contextmanager
def atomic_directory(final: Path):
    """Yield a temp directory next to `final`; on success it is renamed to `final`.

    An interrupted build leaves only a hidden temp directory (removed on the next try), never a
    half-written `final`.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_dataset(
    directory: Path,
    facts: list[RelationFact],
    train_texts: list[str],
    validation: list[EvalPrompt],
    evaluation: list[EvalPrompt],
    seed: int,
    options: dict,
) -> Path:
    """Write a complete dataset directory atomically and return its path."""
    with atomic_directory(directory) as tmp:
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
    if not file.is_file():
        raise FileNotFoundError(f"{file} is missing: {path} is not a complete dataset directory")
    return json.loads(file.read_text())


def load_facts(path: Path) -> list[RelationFact]:
    return [RelationFact.model_validate(r) for r in read_jsonl(Path(path) / "facts.jsonl")]


def load_eval_prompts(path: Path, split: str = "eval") -> list[EvalPrompt]:
    """Evaluation prompts of a dataset directory (`split="validation"` for the validation ones)."""
    return [EvalPrompt.model_validate(r) for r in read_jsonl(Path(path) / f"{split}.jsonl")]


def load_train_texts(path: Path) -> list[str]:
    return [r["text"] for r in read_jsonl(Path(path) / "train.jsonl")]


def read_user_facts(jsonl: Path) -> list[RelationFact]:
    """A user's own facts, one JSON object per line with every RelationFact field except `id`
    and `kind` (optional: ids default to user-0000..., kind is "user")."""
    required = [name for name in RelationFact.model_fields if name not in ("id", "kind")]
    facts = []
    for number, record in enumerate(read_jsonl(jsonl), start=1):
        if not isinstance(record, dict):
            raise ValueError(f"{jsonl} line {number}: expected a JSON object, got {type(record).__name__}")
        missing = [name for name in required if name not in record]
        if missing:
            raise ValueError(
                f"{jsonl} line {number}: missing field(s) {', '.join(missing)}; every line needs "
                f"{', '.join(required)}"
            )
        record = {"id": f"user-{number - 1:04d}", **record, "kind": record.get("kind", "user")}
        try:
            facts.append(RelationFact.model_validate(record))
        except ValidationError as err:
            raise ValueError(f"{jsonl} line {number}: {err}") from None
    if not facts:
        raise ValueError(f"{jsonl} holds no facts")
    ids = [f.id for f in facts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{jsonl}: fact ids must be unique")
    return facts


def read_user_articles(jsonl: Path) -> list[str]:
    """A user's free-text articles: one {"text": ...} object per line."""
    texts = []
    for number, record in enumerate(read_jsonl(jsonl), start=1):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not record["text"].strip():
            raise ValueError(f"{jsonl} line {number}: missing field text (a non-empty string)")
        texts.append(record["text"])
    return texts
