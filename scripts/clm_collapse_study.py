"""When and why does sCLM's encoder stop reading its source? Train variants of a suite's systems with every
checkpoint kept, and probe each checkpoint.

The suite's sCLM (Liu et al. 2023; bible6: learning rate 2e-3, warm-up 300) ignores its source from early in
training. This study trains, on the suite's shared data and tokenizer, the baseline and sCLM with the suite's
schedule and with the paper's (Adam peak 5e-4 after 4,000 warm-up steps, section 4.3), and probes every
`--every` steps, per direction:

* `gain`: the teacher-forced loss with shuffled sources minus the loss with the true ones
  (`hf_langspec.evaluation.source_use`; about 0 for a model that ignores its source);
* the encoder output's `common_share`, each sublayer's branch against the stream it is added to, and each
  encoder CLM call's gate entropy (over log k) and mix size
  against its input (`hf_langspec.evaluation.encoder_collapse`).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/clm_collapse_study.py --suite examples/suites/bible6.yaml \\
        --steps 3000 --every 500 --variants sclm sclm_paper_lr

Runs resume (each is an `hf-langspec train` output folder under --output-dir); the probes go to
`<results_dir>/clm_collapse_study.json` (merged per variant) and a Markdown table is printed.
The same probe of the suite's finished runs (their final models, the whole budget):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/clm_collapse_study.py --finished sclm_paper_lr:1 baseline_paper_lr:1

The post-norm baseline of bible6_clm_norm on the paper's and on the suites' schedule (issue 44):

    OMP_NUM_THREADS=1 .venv/bin/python scripts/clm_collapse_study.py --suite examples/suites/bible6_clm_norm.yaml \\
        --variants baseline_post baseline_post_fast
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# variant: (suite system, training settings that replace the suite's)
# Liu et al. 2023, section 4.3 (Vaswani's schedule); up to step 4,000 the same rates as a linear warm-up
PAPER_SCHEDULE = {"learning_rate": 5e-4, "warmup_steps": 4000, "lr_scheduler_type": "inverse_sqrt"}
# bible6's (the suites') schedule: 2e-3 after 300 warm-up steps, linear decay
SUITES_SCHEDULE = {"learning_rate": 2e-3, "warmup_steps": 300, "lr_scheduler_type": "linear"}
VARIANTS = {
    "baseline": ("baseline", {}),
    "sclm": ("sclm", {}),
    "baseline_paper_lr": ("baseline", PAPER_SCHEDULE),
    "sclm_paper_lr": ("sclm", PAPER_SCHEDULE),
    "sclm_dec": ("sclm_dec", {}),
    # bible6_clm_norm's post-norm baseline on both schedules (issue 44): does a post-LN network without CLM read
    # its source early on the suites' fast schedule, where the post-LN-like sCLM encoder collapsed?
    "baseline_post": ("baseline_post", {}),
    "baseline_post_fast": ("baseline_post", SUITES_SCHEDULE),
}
DIRECTIONS = (("de", "en"), ("en", "de"), ("ru", "en"), ("en", "ru"))


def train(suite, shared, variant: str, steps: int, every: int, output_dir: Path) -> Path:
    from hf_langspec.compare.runner import run_config
    from hf_langspec.training.experiment import run_experiment

    system, training = VARIANTS[variant]
    config = run_config(suite, system, 1, shared)
    config["training"].update(training, max_steps=steps, save_steps=every, save_total_limit=None)
    config["output_dir"] = str(output_dir / variant)
    run_experiment(config)
    return output_dir / variant


def probe_sentences(test_file: Path, sentences: int) -> dict[tuple[str, str], dict[str, str]]:
    """The first `sentences` distinct sources (with a reference) of each probed direction: the same at every
    checkpoint and for every model."""
    rows = [json.loads(line) for line in test_file.read_text().splitlines() if line.strip()]
    probed: dict[tuple[str, str], dict[str, str]] = {}
    for src, tgt in DIRECTIONS:
        pairs = probed[src, tgt] = {}
        for row in rows:  # Bible verses repeat: distinct sources, as source_use requires
            if row["src_lang"] == src and row["tgt_lang"] == tgt and len(pairs) < sentences:
                pairs.setdefault(row["src"], row["tgt"])
    return probed


def probe_model(model, tokenizer, probed: dict[tuple[str, str], dict[str, str]]) -> dict:
    """One model's source use and encoder shape per direction."""
    from hf_langspec.evaluation import source_use
    from hf_langspec.evaluation.encoder_collapse import encoder_collapse

    directions = {}
    for (src, tgt), pairs in probed.items():
        use = source_use(model, tokenizer, list(pairs), list(pairs.values()), src, tgt)
        collapse = encoder_collapse(model, tokenizer, list(pairs), src, tgt)
        entry = {
            "gain": use["gain"],
            "loss": use["loss"],
            "output_common_share": collapse["points"]["output"]["common_share"],
            "output_token_cosine": collapse["points"]["output"]["token_cosine"],
            "sublayers": collapse["sublayers"],
        }
        if "clm" in collapse:
            entry["clm"] = collapse["clm"]
            entry["mean_map_largest_singular_value"] = collapse["clm_maps"]["mean_map_largest_singular_value"]
        directions[f"{src}-{tgt}"] = entry
    return directions


def _gains(name: str, directions: dict) -> str:
    return f"{name}: " + ", ".join(
        f"{d} gain {e['gain']:+.3f} common {e['output_common_share']:.2f}" for d, e in directions.items()
    )


def probe(run_dir: Path, tokenizer_dir: str, test_file: Path, sentences: int) -> list[dict]:
    """Every kept checkpoint of `run_dir`, probed on the first `sentences` distinct sources per direction."""
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec import LangSpecTokenizer

    probed = probe_sentences(test_file, sentences)
    tokenizer = LangSpecTokenizer.from_pretrained(tokenizer_dir)
    points = []

    def step(checkpoint: Path) -> int:
        return int(checkpoint.name.split("-")[1])

    for checkpoint in sorted((run_dir / "checkpoints").glob("checkpoint-*"), key=step):
        model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
        points.append({"step": step(checkpoint), "directions": probe_model(model, tokenizer, probed)})
        print(_gains(f"{run_dir.name} step {points[-1]['step']}", points[-1]["directions"]), flush=True)
    return points


def probe_finished(suite, shared, runs: list[str], sentences: int) -> Path:
    """The final models of finished suite runs (`SYSTEM:SEED`, under the suite's output_dir), merged into
    `<results_dir>/clm_source_use_at_<steps>.json`: how much each model that trained the whole budget reads its
    source, beside its encoder's shape."""
    from hf_langspec.compare.runner import run_config
    from hf_langspec.compare.suite import training_budget
    from hf_langspec.files import write_atomic
    from hf_langspec.model_folder import load_model_folder, load_tokenizer

    probed = probe_sentences(Path(shared["data"]["test_files"]["supervised"]), sentences)
    steps = training_budget(suite.system_config(suite.baseline))[0]
    out = suite.results_dir / f"clm_source_use_at_{steps}.json"
    for run in runs:
        system, _, seed = run.partition(":")
        model_dir = Path(run_config(suite, system, int(seed), shared)["output_dir"]) / "model"  # the runner's layout
        if not (model_dir / "config.json").is_file():
            raise SystemExit(f"{run}: no finished model at {model_dir}; run `hf-langspec compare` for it first.")
        directions = probe_model(load_model_folder(model_dir).eval(), load_tokenizer(model_dir), probed)
        print(_gains(f"{system} seed{seed}", directions), flush=True)
        study = json.loads(out.read_text()) if out.exists() else {}
        study[f"{system} seed{seed}"] = {"step": steps, "directions": directions}
        write_atomic(out, (json.dumps(study, indent=1) + "\n").encode())
    return out


def markdown(study: dict) -> str:
    lines = ["| variant | step | gain de-en | gain en-de | gain ru-en | gain en-ru | encoder output common share "
             "(mean) | largest encoder branch / its stream (mean) | last encoder CLM gate entropy (mean) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for variant, points in study.items():
        for point in points:
            entries = list(point["directions"].values())
            gains = " | ".join(f"{point['directions'][f'{s}-{t}']['gain']:+.3f}" for s, t in DIRECTIONS)
            common = sum(e["output_common_share"] for e in entries) / len(entries)
            ratio = sum(max(b["branch_norm"] / b["stream_norm"] for b in e["sublayers"].values()) for e in entries)
            entropy = "-"
            if "clm" in entries[0]:
                last = list(entries[0]["clm"])[-1]
                entropy = f"{sum(e['clm'][last]['proportion_entropy'] for e in entries) / len(entries):.2f}"
            lines.append(
                f"| {variant} | {point['step']} | {gains} | {common:.2f} | {ratio / len(entries):.1f} | {entropy} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="examples/suites/bible6.yaml")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--sentences", type=int, default=100, help="distinct sources per probed direction")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/clm-collapse-study"))
    parser.add_argument("--probe-only", action="store_true", help="probe the runs already trained")
    parser.add_argument("--finished", nargs="+", metavar="SYSTEM:SEED",
                        help="instead: probe these finished suite runs' final models (clm_source_use_at_STEPS.json)")  # fmt: skip
    args = parser.parse_args()

    from hf_langspec.compare.shared import prepare_shared
    from hf_langspec.compare.suite import load_suite
    from hf_langspec.files import write_atomic

    suite = load_suite(args.suite)
    shared = prepare_shared(suite)
    if args.finished:
        print(f"written to {probe_finished(suite, shared, args.finished, args.sentences)}")
        return 0
    missing = sorted({VARIANTS[v][0] for v in args.variants} - set(suite.systems))
    if missing:
        raise SystemExit(f"--variants need systems {missing}, which {args.suite} lacks; pick variants of its systems")
    out = suite.results_dir / "clm_collapse_study.json"
    for variant in args.variants:
        run_dir = args.output_dir / variant
        if not args.probe_only:
            train(suite, shared, variant, args.steps, args.every, args.output_dir)
        points = probe(run_dir, shared["tokenizer"], Path(shared["data"]["test_files"]["supervised"]), args.sentences)
        study = json.loads(out.read_text()) if out.exists() else {}  # read now: other variants may run beside
        write_atomic(out, (json.dumps({**study, variant: points}, indent=1) + "\n").encode())
    study = json.loads(out.read_text())
    print(markdown(study))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
