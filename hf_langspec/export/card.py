"""Model cards: `huggingface_hub.ModelCard` with model-index metadata and the evaluation table."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import AutoConfig

from ..data.schema import training_data_names
from ..evaluation.evaluate import results_table
from ..files import DamagedFileError, read_json
from ..model_folder import (
    CARD_FILES_FIELD,
    CARD_WEIGHTS_FIELD,
    changed_model_files,
    check_model_folder,
    model_files_fingerprint,
    weights_fingerprint,
)
from ..modeling.registry import variants_by_model_type

TEMPLATES = Path(str(resources.files("hf_langspec.model_cards")))


def example_direction(languages: list[str], evaluated: list[str]) -> tuple[str, str]:
    """The usage example translates an English sentence: from English into a language the model was evaluated on
    (or any other of its languages)."""
    if "en" not in languages and len(languages) >= 2:
        return languages[0], languages[1]
    others = [d.split("-")[1] for d in evaluated if d.startswith("en-")] + [c for c in languages if c != "en"]
    return "en", (others[0] if others else "de")


TAG_EXPLANATION = {
    "source": "prepended to the source sentence",
    "target": "as the first decoder token",
    "both": "the source language's before the source and the target language's as the first decoder token (NLLB-200)",
    "none": "omitted; language modules steer",
}


def build_model_card(
    model_dir: str | os.PathLike,
    results: Mapping[str, Any] | None = None,
    train_sizes: Mapping[str, int] | None = None,
    model_name: str | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",
    datasets: list[str] | None = None,
    paper: str | None = None,
    template: str | os.PathLike | None = None,
) -> ModelCard:
    """A model card for the saved model in `model_dir` (its config.json supplies languages and shape)."""

    weights, files = _checked_record(model_dir, results, model_name, repo_id)
    if datasets is None:
        datasets = _recorded_training_data(Path(model_dir))
    config = AutoConfig.from_pretrained(model_dir)
    method = variants_by_model_type().get(config.model_type)
    if method is None:
        known = sorted(variants_by_model_type())
        raise ValueError(f"{model_dir} holds a {config.model_type!r} model; cards exist for {known}.")
    model_name = model_name or Path(model_dir).resolve().parent.name
    repo_id = repo_id or model_name
    eval_results = _eval_results(results)
    card_data = ModelCardData(
        language=list(config.languages),
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "multilingual", "hf_langspec", "custom_code", config.model_type],
        datasets=datasets or None,
        metrics=["bleu", "chrf"],
        model_name=model_name,
        eval_results=eval_results or None,
        **{CARD_WEIGHTS_FIELD: weights, CARD_FILES_FIELD: files},
    )
    layers = f"{config.encoder_layers}+{config.decoder_layers} layers, d_model {config.d_model}, FFN {config.encoder_ffn_dim}"
    norm = "pre-norm" if config.normalize_before else "post-norm"
    sizes = ", ".join(f"{d} {n:,}" for d, n in sorted((train_sizes or {}).items())) or "see the training config"
    src, tgt = example_direction(config.languages, list((results or {}).get("directions", {})))
    return ModelCard.from_template(
        card_data,
        template_path=str(template or _template(config.model_type)),
        method_settings=config.card_settings(),
        model_name=model_name,
        repo_id=repo_id,
        method_description=method.description
        + (" (with the XLM additive language embedding)" if config.language_embedding == "additive" else "")
        + ".",
        languages=config.languages,
        lang_tag_style=config.lang_tag_style,
        tag_explanation=TAG_EXPLANATION[config.lang_tag_style],
        architecture=f"Transformer ({norm}), {layers}, vocabulary {config.vocab_size}",
        train_summary=sizes,
        results_table=results_table(results) if results else "Not evaluated yet.",
        evaluation_note=evaluation_note(results),
        paper=paper or method.citation,
        example_text="In the beginning God created the heavens and the earth."
        if src == "en"
        else f"(a sentence in {src})",
        example_src=src,
        example_tgt=tgt,
    )


def _checked_record(model_dir: str | os.PathLike, results: Mapping[str, Any] | None, model_name: str | None,
                    repo_id: str | None) -> tuple[str, dict[str, str]]:  # fmt: skip
    """The folder's weights and model-files fingerprints, after checking the card's inputs: a loadable repo id, a
    non-empty name, a model folder, and results that describe these weights and files (a ValueError naming the fix
    otherwise)."""
    if repo_id is not None:
        check_repo_id(repo_id)  # the card's usage code loads it
    if model_name is not None and not model_name.strip():
        raise ValueError(
            "the model name is empty; give one (--model-name NAME), or leave it out for the folder's name."
        )
    check_model_folder(model_dir)  # missing, damaged or foreign folders in one line, as for every command
    weights = weights_fingerprint(model_dir)
    described = (results or {}).get("model_weights")
    if described is not None and described != weights:
        raise ValueError(
            f"the results describe other weights ({described}) than {model_dir} holds ({weights}); give the "
            f"results.json of an evaluation of this folder (`hf-langspec evaluate {model_dir} ...`)."
        )
    files = model_files_fingerprint(model_dir)
    changed = changed_model_files((results or {}).get("model_files"), files)
    if changed:
        raise ValueError(
            f"the results scored {model_dir} with another {', '.join(changed)} than it holds now (edited or copied in "
            f"since); evaluate the folder as it is (`hf-langspec evaluate {model_dir} ...`) and give that results.json."
        )
    if results and described is None:
        print("note: the results do not record which weights they scored (written before results did); the card "
              f"takes them as {model_dir}'s.")  # fmt: skip
    return weights, files


def _eval_results(results: Mapping[str, Any] | None) -> list[EvalResult]:
    """The Hub's `model-index` entries: BLEU and chrF of every direction scored."""
    return [
        EvalResult(
            task_type="translation", task_name=f"Translation {direction}",
            dataset_type=scores.get("set", "test"), dataset_name=scores.get("set", "test"),
            dataset_config=direction, dataset_split=scores.get("set", "test"),
            metric_type=metric, metric_name=metric.upper() if metric == "bleu" else "chrF",
            metric_value=round(scores[metric], 2),
        )
        for direction, scores in (results or {}).get("directions", {}).items()
        for metric in ("bleu", "chrf")
    ]  # fmt: skip


def evaluation_note(results: Mapping[str, Any] | None) -> str:
    """How the card's scores were measured: sentences per direction, the search, the metrics' signatures."""
    directions = (results or {}).get("directions", {})
    if not directions:
        return ""
    counts = sorted({scores["sentences"] for scores in directions.values() if "sentences" in scores})
    settings = (results or {}).get("settings", {})
    parts = []
    if counts:
        parts.append(
            f"{counts[0]}" + (f"-{counts[-1]}" if counts[-1] != counts[0] else "") + " test sentences per direction"
        )
    if "num_beams" in settings:
        parts.append(f"beam {settings['num_beams']}, at most {settings['max_new_tokens']} new tokens")
    signature = next((s["bleu_signature"] for s in directions.values() if "bleu_signature" in s), None)
    if signature:
        parts.append(f"sacreBLEU `{signature}`")
    if any("off_target" in s for s in directions.values()):
        parts.append("off-target: the share of outputs a language identifier assigns to another language")
    return "Measured on " + "; ".join(parts) + "." if parts else ""


def check_repo_id(repo_id: str) -> None:
    """Refuse a Hub repo id the Hub would refuse (`huggingface_hub`'s own rule), before a card or an upload uses it."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ValueError(
            f"repo id {repo_id!r} is not one the Hub accepts; give NAME or NAMESPACE/NAME of letters, digits, '-', '_' "
            "and '.' (not starting or ending with '-' or '.'), at most 96 characters, e.g. my-org/bible-clm."
        ) from None


def rewrite_repo_id(card_text: str, repo_id: str) -> str:
    """The card's usage code pointed at `repo_id` (a card written before the Hub name was known names the folder)."""
    return re.sub(r'from_pretrained\("[^"]*"', f'from_pretrained("{repo_id}"', card_text)


def _recorded_training_data(model_dir: Path) -> list[str] | None:
    """The training data a run recorded (`run_info.json` beside the model folder of `hf-langspec train`), or None
    (the card then names no dataset rather than a wrong one)."""

    info = model_dir.resolve().parent / "run_info.json"
    try:
        data = read_json(info)["config"]["data"] if info.is_file() else None
        return training_data_names(data) if isinstance(data, dict) else None
    except (DamagedFileError, KeyError, TypeError):
        return None


def _template(model_type: str) -> Path:
    own = TEMPLATES / f"{model_type}.md"
    return own if own.exists() else TEMPLATES / "langspec_base.md"


def write_model_card(
    model_dir: str | os.PathLike, results: Mapping[str, Any] | None = None, force: bool = False, **kwargs: Any
) -> Path:
    """Build the card (see `build_model_card`) and save it as `model_dir/README.md`, replacing a card this package
    wrote (tagged `hf_langspec`) but not a README.md of the user's unless `force`."""
    path = Path(model_dir) / "README.md"
    if path.exists() and not force and not _written_here(path):
        raise FileExistsError(
            f"{path} exists and is not a card hf_langspec wrote; pass --force (force=True) to replace it, or move it."
        )
    card = build_model_card(model_dir, results, **kwargs)
    card.save(path)
    return path


def _written_here(path: Path) -> bool:
    """Whether a README.md is a card of this package (its metadata carries the `hf_langspec` tag)."""
    try:
        tags = ModelCard.load(path).data.to_dict().get("tags") or []
    except (ValueError, OSError, yaml.YAMLError):  # unreadable front matter: a README of the user's
        return False
    return isinstance(tags, list) and "hf_langspec" in tags


__all__ = ["build_model_card", "evaluation_note", "rewrite_repo_id", "write_model_card"]
