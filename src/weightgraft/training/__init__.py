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
