"""Training: the built-in family, pretraining, finetuning, weight averaging, evaluation."""

from typing import Literal, get_args

# The file beside every model weightgraft writes (pretrained, finetuned, averaged) that records
# how it was made: the options, the data, and what the run measured (times included).
TRAINING_RECORD = "training_config.json"

# How a finetune learns the general text mixed in: "tokens", cross-entropy on its tokens as on the
# facts; "kl", the pretrained model's whole next-token distribution at each position
# (`training.distill`). Here, light to import, for the reproduce recipe and the CLI too.
GeneralLoss = Literal["tokens", "kl"]
GENERAL_LOSSES: tuple[str, ...] = get_args(GeneralLoss)

# The attention kernel a finetune trains with: transformers' "sdpa" (its default where the model
# has it) or "eager" (plain matmul and softmax). The same attention either way; on a CPU at the
# laptop setting's ~40 tokens eager's step is measured faster on some models (`paper.cpu_attention`).
AttentionKernel = Literal["sdpa", "eager"]
ATTENTION_KERNELS: tuple[str, ...] = get_args(AttentionKernel)
