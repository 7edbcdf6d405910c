"""Training: the built-in family, pretraining, finetuning, weight averaging, evaluation."""

# The file beside every model weightgraft writes (pretrained, finetuned, averaged) that records
# how it was made: the options, the data, and what the run measured (times included).
TRAINING_RECORD = "training_config.json"
