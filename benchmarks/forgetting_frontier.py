"""What a laptop finetune keeps of the pretrained model's knowledge, along its interpolation towards PRE.

Trains one reproduce job's finetune (FMRA_sft unless --finetune names another; the job's own
datasets, self-replay texts and `finetune_config`, through `pipelines.reproduce.Pipeline`'s steps,
so a rerun reuses what is done), then scores PRE + a (FT - PRE) for each a on that finetune's
validation prompts (top-5, all of them) and on the held-out plain facts PRE answers at top-1
(`paper.plain_facts`). This is the measurement behind
issue 40's forgetting tables in docs/real_models.md; it is an experiment, not a timing (tens of
minutes a model on two cores), so `make bench` does not run it.

Usage: python benchmarks/forgetting_frontier.py --model gemma3-270m --lr 2.5e-5 --out runs/g025 \
           [--finetune FMRA_sft] [--alphas 1,0.9,0.8,0.7] [--facts 100] [--epochs 3] [--anchor A] [--precision bf16] [--no-replay] [--general-loss kl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from weightgraft.data.io import load_eval_prompts
from weightgraft.experiments.models import load_model, load_tokenizer
from weightgraft.paper.plain_fact_list import plain_fact_candidates
from weightgraft.paper.plain_facts import answer_ids, answer_ranks
from weightgraft.paper.reproduce_job import plan_job
from weightgraft.paper.reproduce_recipe import ReproduceOptions
from weightgraft.pipelines.reproduce import Pipeline
from weightgraft.training.average import average_state
from weightgraft.training.evaluate import topk_accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--alphas", default="1,0.9,0.8,0.7")
    parser.add_argument("--facts", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=None, help="the setting's (3) unless given")
    parser.add_argument("--anchor", type=float, default=None, help="the setting's (0: off) unless given")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--no-replay", dest="replay", action="store_false")
    parser.add_argument("--general-loss", default="kl", choices=["tokens", "kl"])
    parser.add_argument("--finetune", default="FMRA_sft", help="which of the job's finetunes (FMRA_sft, FMRA_b2a, ...)")
    args = parser.parse_args()

    options = ReproduceOptions(
        model=args.model,
        out=args.out,
        device="cpu",
        precision=args.precision,
        attention="eager",
        facts=args.facts,
        epochs=args.epochs,
        anchor=args.anchor,
        lr=args.lr,
        setting="laptop",
        replay=args.replay,
        general_loss=args.general_loss,
    )
    job = plan_job(options)
    if args.finetune not in job.finetunes:
        parser.error(f"--finetune {args.finetune!r}: the job's finetunes are {', '.join(job.finetunes)}")
    pipe = Pipeline(job, progress=True)
    pipe.find_base_model()
    data = pipe.step("datasets", pipe.data_inputs(), pipe.build_datasets)
    if args.replay:
        pipe.make_replay()
    finetune = job.finetunes[args.finetune]
    pipe.run_finetune(finetune, data)
    record = pipe.ledger.record_of(f"finetune:{args.finetune}")["outputs"]
    print("validation top-5 by epoch", record["validation_top5_by_epoch"], "kept epoch", record["best_epoch"])

    pre_path, tuned_path = pipe.model_paths["pre"], pipe.model_paths[args.finetune]
    tokenizer = load_tokenizer(pre_path)
    encoded = answer_ids(tokenizer, plain_fact_candidates())
    validation = load_eval_prompts(Path(pipe.here(data[finetune.dataset]["path"])), "validation")
    model = load_model(pre_path, "cpu", "float32")
    pre_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    tuned_state = load_model(tuned_path, "cpu", "float32").state_dict()
    known = answer_ranks(model, encoded) == 1
    rows = []
    for share in (float(a) for a in args.alphas.split(",")):
        # PRE + a (FT - PRE), as `weightgraft average PRE FT --weights 1-a,a` writes it
        model.load_state_dict(average_state([pre_state, tuned_state], [1 - share, share]))
        ranks = answer_ranks(model, encoded)[known]
        row = {
            "a": share,
            "validation_top5": round(topk_accuracy(model, tokenizer, validation, 5), 4),
            "kept_top1": round(float((ranks == 1).mean()), 3),
            "kept_top5": round(float((ranks <= 5).mean()), 3),
            "held_out_facts": int(known.sum()),
            "validation_prompts": len(validation),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "forgetting_frontier.json").write_text(json.dumps({"finetune": record, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
