"""Checks that a donor can be grafted into a recipient (that an adapter covers every parameter is
`weightgraft.adapters.coverage`).

Equal parameter shapes are not enough: two models can agree on every shape and still compute
differently (another activation, RoPE base, norm epsilon, head count with the same width, sliding
window or soft-capping). Grafting "everything" would then not reproduce the donor. So configs are
compared on every field except those listed below as not changing a forward pass in eval mode.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from torch import nn
from transformers import PretrainedConfig

from weightgraft.donors import DonorSource

# Config fields that do not change what an eval-mode forward pass computes: names, provenance,
# storage dtype (checked per parameter instead), special token ids, initialisation, output and
# generation switches. Every other field is compared.
_NAMING_FIELDS = ("_name_or_path", "name_or_path", "_commit_hash", "transformers_version", "architectures")
_STORAGE_FIELDS = ("model_type", "torch_dtype", "dtype")  # model_type is compared first, on its own
_TASK_FIELDS = ("id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "task_specific_params")
_TOKENIZER_FIELDS = ("tokenizer_class", "prefix")
_TOKEN_ID_FIELDS = tuple(
    f"{t}_token_id" for t in ("bos", "eos", "pad", "sep", "decoder_start", "forced_bos", "forced_eos")
)
_INIT_FIELDS = ("initializer_range", "initializer_factor")
_OUTPUT_FIELDS = (
    ("use_cache", "return_dict", "output_attentions", "output_hidden_states", "output_scores")
    + ("return_dict_in_generate", "torchscript", "chunk_size_feed_forward", "gradient_checkpointing")
    + ("_attn_implementation", "attn_implementation")
)
_GENERATION_FIELDS = (
    ("max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups")
    + ("temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty")
    + ("no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences")
    + ("diversity_penalty", "remove_invalid_values", "exponential_decay_length_penalty")
    + ("suppress_tokens", "begin_suppress_tokens")
)
IGNORED_CONFIG_FIELDS = frozenset(
    _NAMING_FIELDS
    + _STORAGE_FIELDS
    + _TASK_FIELDS
    + _TOKENIZER_FIELDS
    + _TOKEN_ID_FIELDS
    + _INIT_FIELDS
    + _OUTPUT_FIELDS
    + _GENERATION_FIELDS
)


def _ignored(field: str) -> bool:
    """Dropout rates (no effect in eval mode) and GPT-2's sequence-summary head settings (only
    used by its classification heads) are ignored along with the named fields."""
    leaf = field.rsplit(".", 1)[-1]
    return leaf in IGNORED_CONFIG_FIELDS or "dropout" in leaf or leaf.endswith("pdrop") or leaf.startswith("summary_")


def _as_dict(config: Any) -> dict:
    """A config's fields: Hugging Face configs serialise themselves; plain objects give vars()."""
    return config.to_dict() if hasattr(config, "to_dict") else dict(vars(config))


def config_differences(recipient: PretrainedConfig, donor: PretrainedConfig) -> dict[str, tuple[Any, Any]]:
    """Fields (dotted for nested configs) that differ and may change the computation."""
    out: dict[str, tuple[Any, Any]] = {}

    def compare(a: dict, b: dict, prefix: str) -> None:
        for key in sorted(a.keys() | b.keys()):
            field = prefix + key
            if _ignored(field):
                continue
            x, y = a.get(key, "<unset>"), b.get(key, "<unset>")
            if isinstance(x, dict) and isinstance(y, dict):
                compare(x, y, field + ".")
            elif x != y:
                out[field] = (x, y)

    compare(_as_dict(recipient), _as_dict(donor), "")
    return out


def _allowed(field: str, allowed: Collection[str]) -> bool:
    """A dotted field is allowed by its full name, a parent's name or its own last name, so that
    "rope_theta" covers "rope_parameters.rope_theta" (where transformers 5 keeps it)."""
    parts = field.split(".")
    names = {".".join(parts[: i + 1]) for i in range(len(parts))} | {parts[-1]}
    return bool(names & set(allowed))


def check_compatible(
    recipient: nn.Module,
    donor: DonorSource,
    name: str = "donor",
    allow_config_differences: Collection[str] = (),
) -> None:
    """Refuse a donor that differs from the recipient in architecture, config, parameters,
    device or dtype. `name` labels the donor in messages."""
    config = getattr(recipient, "config", None)
    if getattr(config, "model_type", None) is None:
        raise TypeError("the recipient must be a Hugging Face model with a .config (e.g. AutoModelForCausalLM)")
    who = f"donor {name!r}"
    if config.model_type != donor.config.model_type:
        raise ValueError(
            f"models differ in architecture: recipient is {config.model_type!r}, {who} is {donor.config.model_type!r}"
        )
    differences = {
        f: v for f, v in config_differences(config, donor.config).items() if not _allowed(f, allow_config_differences)
    }
    if differences:
        listed = "; ".join(f"{f}: recipient {r!r}, donor {d!r}" for f, (r, d) in differences.items())
        allow = ", ".join(repr(f) for f in differences)
        raise ValueError(
            f"recipient and {who} have configs that differ in fields that change the computation: {listed}. "
            "Graft between models of one configuration, or, if you mean it, pass "
            f"Grafter(..., allow_config_differences=({allow},))"
        )
    r_shapes = {n: p.shape for n, p in recipient.named_parameters()}
    d_shapes = donor.parameter_shapes()
    problems = [f"{n} only in recipient" for n in r_shapes.keys() - d_shapes.keys()]
    problems += [f"{n} only in donor" for n in d_shapes.keys() - r_shapes.keys()]
    problems += [
        f"{n}: recipient {tuple(s)} vs donor {tuple(d_shapes[n])}"
        for n, s in r_shapes.items()
        if n in d_shapes and s != d_shapes[n]
    ]
    if problems:
        shown = "; ".join(sorted(problems)[:6])
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        raise ValueError(
            f"recipient and {who} differ in parameters: {shown}{more}. Graft between models of one configuration."
        )
    try:
        donor.check_against(recipient)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{who}: {error}") from error
