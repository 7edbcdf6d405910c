"""What planning reads, each once per run: the models' fingerprints and file hashes, the shared
tokenizer and the datasets' prompts; never weights, so that `build_plan` need not know the
execution cache (`execute.Resources` extends this with the models and grafters)."""

from __future__ import annotations

from transformers import AutoConfig

from weightgraft.adapters import adapter_for
from weightgraft.data.io import load_eval_prompts
from weightgraft.errors import UserError
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.models import (
    fingerprint_model,
    load_tokenizer,
    model_dir,
    model_file_hashes,
    vocab_fingerprint,
)


class PlanInputs:
    """A run's weight-free inputs, read lazily and kept."""

    def __init__(self, config: RunConfig):
        self.config = config
        self._fingerprints: dict[str, str] = {}
        self._tokenizer = None
        self._prompts: dict[str, list] = {}

    def fingerprint(self, key: str) -> str:
        if key not in self._fingerprints:
            self._fingerprints[key] = fingerprint_model(self.config.models[key])
        return self._fingerprints[key]

    def model_info(self, key: str) -> dict:
        path = self.config.models[key]
        return {
            "path": path,
            "resolved": str(model_dir(path) or ""),
            "sha256": self.fingerprint(key),
            "files": model_file_hashes(path),  # each file's own sha256
            "adapter": self.adapter_origin(key),
        }

    def adapter_origin(self, key: str) -> str:
        """Where the model's adapter comes from: "registered", "inferred" or "alias of T"."""
        path = self.config.models[key]
        folder = model_dir(path)
        config = AutoConfig.from_pretrained(
            str(folder) if folder else path, trust_remote_code=self.config.trust_remote_code
        )
        return adapter_for(config).origin

    def tokenizer(self, keys: list[str]):
        """One tokenizer for the run; every model must share its vocabulary."""
        if self._tokenizer is None:
            seen = {}
            for key in keys:
                path = self.config.models[key]
                if path in seen:
                    continue
                seen[path] = load_tokenizer(path, self.config.trust_remote_code, f"models.{key}")
            first_path, first = next(iter(seen.items()))
            reference = vocab_fingerprint(first)
            for path, tok in seen.items():
                if vocab_fingerprint(tok) != reference:
                    raise UserError(
                        f"models {first_path!r} and {path!r} have different "
                        "tokenizers; grafting needs one shared vocabulary, so use "
                        "finetunes of one base model"
                    )
            self._tokenizer = first
        return self._tokenizer

    def prompts(self, dataset: str) -> list:
        if dataset not in self._prompts:
            self._prompts[dataset] = list(load_eval_prompts(self.config.datasets[dataset]))
        return self._prompts[dataset]
