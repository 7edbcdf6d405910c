"""The finetune's `Trainer`: evaluation is validation top-k accuracy with the best epoch kept, the
loss is the plain, labelled-positions or distilled one, and a reloaded checkpoint of a tied model is
not reported as missing its tied name. `training.finetune` sets it up and runs it."""

from __future__ import annotations

from transformers import EarlyStoppingCallback, Trainer
from transformers.utils import logging as hf_logging

from weightgraft.training.batches import labelled_loss
from weightgraft.training.distill import distilled_loss
from weightgraft.training.evaluate import topk_accuracy


class EarlyStopping(EarlyStoppingCallback):
    """transformers' early stopping, without its warning that the best model will not be loaded
    at the end: `AccuracyTrainer` (or, with checkpoints, Trainer itself) keeps the best epoch."""

    def on_train_begin(self, args, state, control, **kwargs):
        callback_logger = hf_logging.get_logger("transformers.trainer_callback")
        level = callback_logger.level
        callback_logger.setLevel(hf_logging.ERROR)
        try:
            super().on_train_begin(args, state, control, **kwargs)
        finally:
            callback_logger.setLevel(level)


class AccuracyTrainer(Trainer):
    """Evaluation = validation top-k accuracy; the best weights are kept in memory (on CPU)."""

    def __init__(
        self,
        *args,
        validation,
        eval_tokenizer,
        k: int,
        keep_best: bool = True,
        labelled_logits_only: bool = False,
        base=None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.labelled_logits_only = labelled_logits_only
        self.base = base  # the frozen pretrained model of a distilled loss (general_loss "kl")
        self.validation = validation
        self.eval_tokenizer = eval_tokenizer
        self.k = k
        self.keep_best = keep_best  # False: Trainer's checkpoints keep the best epoch instead
        self.history: list[float] = []
        self.best_state: dict | None = None
        self.best_epoch = -1

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """With `labelled_logits_only`: the causal LM loss with the unembedding run only where a
        label is (the model's own loss, normalized the same way, without the padding's logits).
        With a base model: the distilled loss (`training.distill`), which computes only there too."""
        if self.base is not None:
            loss, outputs = distilled_loss(model, self.base, inputs, num_items_in_batch)
            return (loss, outputs) if return_outputs else loss
        if not self.labelled_logits_only:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss, outputs = labelled_loss(model, inputs, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    def _issue_warnings_after_load(self, load_result) -> None:
        """Trainer's report on a reloaded checkpoint (the best epoch, a resume), less the names of
        tied weights: a checkpoint holds a tied tensor once (SmolLM2's `lm_head.weight` is its
        embedding), and transformers called the other name missing although it is loaded."""
        tied = tied_names(self.model)
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        accuracy = topk_accuracy(self.model, self.eval_tokenizer, self.validation, self.k)
        self.history.append(accuracy)
        if self.keep_best and (self.best_state is None or accuracy > max(self.history[:-1], default=-1.0)):
            self.best_state = {n: t.detach().to("cpu", copy=True) for n, t in self.model.state_dict().items()}
            self.best_epoch = len(self.history)
        metrics = {f"{metric_key_prefix}_top{self.k}_accuracy": accuracy}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


def tied_names(model) -> set[str]:
    """Names of parameters that are another parameter under a second name (tied weights)."""
    first: dict[int, str] = {}
    tied = set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            tied.add(name)
        else:
            first[id(parameter)] = name
    return tied
