"""The evaluation step: the saved model scored on the test sets (BLEU, chrF, off-target, beside copying the
source), the results saved with the weights they scored, the `expected` ranges checked, the model card written,
and the config's example translated.

In: the trained model and its folder, the tokenizer, `RunData`'s test sets, the `TrainingSet`'s sizes. Out: the
results, their files and, where the config asks, the `expected` check and the example translation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...data.processing import per_direction
from ...data.schema import training_data_names
from ...evaluation import copy_baseline, evaluate_model, results_table, save_results, translate
from ...evaluation.expected import compare_with_expected
from ...evaluation.language_id import language_identifier
from ...evaluation.metrics import SentencePieceBLEU
from ...export.card import write_model_card
from ...model_folder import model_files_fingerprint, weights_fingerprint
from ..config import EVALUATION_DEFAULTS, sentence_limit
from .context import RunContext, RunData, TrainingSet


def evaluate_and_publish(config: dict[str, Any], trained: Any, model_dir: Path, tokenizer: Any, data: RunData,
                         training_set: TrainingSet, run: RunContext) -> dict[str, Any]:  # fmt: skip
    """Score, save, card and translate (see the module); returns what it found: `results`, `results_files`, and
    `expected` and `example` where the config asks for them."""

    outcome: dict[str, Any] = {}
    tests, output_dir = data.tests, run.output_dir
    evaluation = config.get("evaluation", {})
    settings = EVALUATION_DEFAULTS | evaluation
    if evaluation.get("splits") == []:  # evaluation switched off
        return outcome
    tests = {
        name: [row for rows in per_direction(rows, sentence_limit(evaluation, name)).values() for row in rows]
        for name, rows in tests.items()
        if name in evaluation.get("splits", list(tests))
    }
    model = trained.trainer.model_for_evaluation(trained.model, model_dir).eval()
    run.say(
        f"evaluation: {sum(map(len, tests.values())):,} sentences of {', '.join(tests)}, beam {settings['num_beams']}"
    )
    results = evaluate_model(
        model, tokenizer, tests,
        batch_size=settings["batch_size"], num_beams=settings["num_beams"],
        max_new_tokens=settings["max_new_tokens"], off_target=settings["off_target"],
        identifier=language_identifier_of(evaluation),
        spm=SentencePieceBLEU(evaluation["spm"]) if "spm" in evaluation else None,
    )  # fmt: skip
    baseline = copy_baseline(tests)
    weights, files = weights_fingerprint(model_dir), model_files_fingerprint(model_dir)
    paths = save_results(results, output_dir / "evaluation", baseline, weights=weights, files=files)
    print(results_table(results, baseline))
    if config.get("expected"):
        outcome["expected"] = compare_with_expected(results, config["expected"])
        print("\n".join(outcome["expected"]))
    card_section = {"datasets": training_data_names(config["data"]), **config.get("card", {})}
    # the results as saved, with the weights they scored: the card checks them (a fresh run said they were unknown)
    scored = {**results, "model_weights": weights, "model_files": files}
    write_model_card(
        model_dir, scored, force=True, train_sizes=training_set.sizes, **card_section
    )  # the run's own folder
    outcome |= {"results": results, "results_files": paths}
    example = config.get("translate")
    if example:
        outcome["example"] = translate(
            model, tokenizer, [example["text"]], example["src_lang"], example["tgt_lang"], show_progress=False,
            max_new_tokens=model.generation_config.max_new_tokens,
        )[0]  # fmt: skip
        print(f"{example['src_lang']} -> {example['tgt_lang']}: {example['text']}\n  {outcome['example']}")
    return outcome


def language_identifier_of(evaluation: dict[str, Any]):
    """`evaluation.language_identifier` (lingua, langid, py3langid), or None for the default."""

    name = evaluation.get("language_identifier")
    return (
        language_identifier(name) if name and evaluation.get("off_target", EVALUATION_DEFAULTS["off_target"]) else None
    )


__all__ = ["evaluate_and_publish", "language_identifier_of"]
