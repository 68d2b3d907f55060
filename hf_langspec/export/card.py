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

TEMPLATES = Path(str(resources.files("hf_langspec.model_cards")))
JOHNSON = (
    "Johnson et al. (2017). Google's Multilingual Neural Machine Translation System: Enabling Zero-Shot "
    "Translation. TACL 5. https://aclanthology.org/Q17-1024"
)
LUO = (
    "Luo, Gao, Zheng, Ke, He, Wang and Liu (2021). Revisiting Language Encoding in Learning Multilingual "
    "Representations (XLP). ICML 2021."
)
LIU = (
    "Liu, Huang, Li, Liu, Su and Huang (2022). Adaptive Token-level Cross-lingual Feature Mixing for Multilingual "
    "Neural Machine Translation. EMNLP 2022. https://aclanthology.org/2022.emnlp-main.687"
)
JIN = (
    "Jin and Xiong (2022). Informative Language Representation Learning for Massively Multilingual Neural Machine "
    "Translation. COLING 2022. https://aclanthology.org/2022.coling-1.458"
)
QU = (
    "Qu and Watanabe (2022). Adapting to Non-Centered Languages for Zero-shot Multilingual Translation. "
    "COLING 2022. https://aclanthology.org/2022.coling-1.467"
)
YANG = (
    "Yang, Yin, Ma, Yang, Huang, Zhang, Li and Wei (2022). High-resource Language-specific Training for "
    "Multilingual Neural Machine Translation. IJCAI 2022. https://www.ijcai.org/proceedings/2022/619"
)
BAPNA = (
    "Bapna and Firat (2019). Simple, Scalable Adaptation for Neural Machine Translation. EMNLP 2019. "
    "https://aclanthology.org/D19-1165; Philip, Berard, Galle and Besacier (2020). Monolingual Adapters for "
    "Zero-Shot Neural Machine Translation. EMNLP 2020. https://aclanthology.org/2020.emnlp-main.361; Fan et al. "
    "(2021). Beyond English-Centric Multilingual Machine Translation. JMLR 22 (LS-MNMT)"
)
HU = (
    "Hu, Shen, Wallis, Allen-Zhu, Li, Wang, Wang and Chen (2022). LoRA: Low-Rank Adaptation of Large Language "
    "Models. ICLR 2022. https://openreview.net/forum?id=nZeVKeeFYf9"
)
PIRES = (
    "Pessoa Pires, Schmidt, Liao and Peitz (2023). Learning Language-Specific Layers for Multilingual Machine "
    "Translation. ACL 2023. https://arxiv.org/abs/2305.02665"
)
XU = (
    "Xu, Tan, Li, Chen, Van Durme, Koehn and Murray (2023). Condensing Multilingual Knowledge with Lightweight "
    "Language-Specific Modules. EMNLP 2023. https://arxiv.org/abs/2305.13993"
)
# model_type -> (what the model is, the paper to cite)
METHODS = {
    "langspec_base": (
        "the multilingual Transformer of Johnson et al. (2017), the baseline every method of the package is compared with",
        JOHNSON,
    ),
    "langspec_xlp_mt": (
        "the multilingual Transformer with cross-lingual language projections (XLP, Luo et al. 2021): the encoder "
        "projects token embeddings with a d x d matrix of the source language, the decoder with one of the target language",
        LUO,
    ),
    "langspec_clm": (
        "the multilingual Transformer with token-level cross-lingual feature mixing (CLM, Liu et al. 2022): after "
        "its sublayers, each token is mixed from k shared linear maps with proportions computed from the token itself",
        LIU,
    ),
    "langspec_laa": (
        "the multilingual Transformer with informative language representations (Jin and Xiong 2022): the target "
        "language's embedding embodied at chosen switching points (LEE) and/or a d x d language matrix added to the "
        "attention projections (LAA)",
        JIN,
    ),
    "langspec_cll": (
        "the multilingual Transformer with central-language-aware layers (CLL, Qu and Watanabe 2022): decoder FFNs "
        "gain a small language-specific FFN, scaled by a learned t_l, for every non-central target language",
        QU,
    ),
    "langspec_hlt": (
        "the multilingual Transformer with HLT-MT's selective language-specific pool (Yang et al. 2022): adapters "
        "after the decoder, one per group of high-resource target languages and a universal one for the others",
        YANG,
    ),
    "langspec_adapter": (
        "the multilingual Transformer with per-language adapters, the adapter-family baseline (Bapna and Firat "
        "2019; monolingual adapters of Philip et al. 2020; LS-MNMT's language-specific layers of Fan et al.)",
        BAPNA,
    ),
    "langspec_lsl": (
        "the multilingual Transformer with language-specific Transformer layers (LSL, Pires et al. 2023): at chosen "
        "positions a layer per language, chosen by each example's source or target language, the other layers shared",
        PIRES,
    ),
    "langspec_lms": (
        "the multilingual Transformer with language-specific matrix synthesis (LMS, Xu et al. 2023): each chosen "
        "projection W gains a low-rank W_v W_f of the example's languages, optionally condensed by fuse distillation "
        "into one shared pair that inference uses alone",
        XU,
    ),
    "langspec_lora": (
        "the multilingual Transformer with language-specific LoRA: a low-rank update (alpha / r) B A of the attention "
        "projections for each language, the encoder's chosen by the source language and the decoder's by the target",
        HU,
    ),
}
CLM_VARIANT_NAMES = {"sclm": "sCLM (one gate per layer)", "mclm": "mCLM (a gate per layer and {key})",
                     "ls": "LS ablation (one map per {key}, no gate)", "none": "none"}  # fmt: skip


def method_settings(config: Any) -> str:
    """The method's own settings as a Markdown list (empty for the baseline and XLP)."""
    if config.model_type == "langspec_laa":
        return "\n".join([
            f"- LEE points: {', '.join(config.lee_points) or 'none'} ({config.lee_embedding} embeddings)",
            f"- LAA in: {', '.join(config.laa_points) or 'none'}"
            + (" (one matrix per language per layer)" if config.laa_per_layer else " (one matrix per language per stack)")
            + ("; LAA^R: random matrices" if config.laa_random else ""),
        ])  # fmt: skip
    if config.model_type == "langspec_hlt":
        return "\n".join([
            f"- High-resource targets (pool adapters): {', '.join(config.high_resource_languages)}; others: the universal adapter",
            f"- {config.hlt_num_adapters} adapters of inner size {config.hlt_hidden_dim} ({config.hlt_activation}); stage {config.hlt_stage}",
        ])  # fmt: skip
    if config.model_type == "langspec_adapter":
        form = "a d x d matrix" if config.adapter_form == "matrix" else f"bottleneck {config.adapter_dim}"
        return "\n".join([
            f"- Preset: {config.adapter_preset or 'none (fields set one by one)'}",
            f"- Adapters in: {', '.join(config.adapter_stacks)}, "
            + ("after every layer" if config.adapter_position == "layers" else "once after the stack")
            + (" (one per key shared by all layers)" if config.adapter_share_layers else ""),
            f"- One adapter per {'direction' if config.adapter_key == 'pair' else 'language (source in the encoder, target in the decoder)'}",
            f"- Form: {form}, LayerNorm {config.adapter_norm}, {config.adapter_activation}",
        ])  # fmt: skip
    if config.model_type == "langspec_lora":
        return "\n".join([
            f"- LoRA in: {', '.join(config.lora_points)}; projections {', '.join(config.lora_projections)}",
            f"- Rank {config.lora_rank}, alpha {config.lora_alpha:g}, dropout {config.lora_dropout:g}; the encoder's "
            f"keyed by the {config.lora_encoder_language} language",
        ])  # fmt: skip
    if config.model_type == "langspec_lms":
        synthesis = ("pair-wise (W_v of the source, W_f of the target)" if config.lms_synthesis == "pair"
                     else "language-wise (the encoder's source, the decoder's target)")  # fmt: skip
        route = (f"fuse distillation, inference through the {config.lms_inference_route} matrices"
                 if config.lms_fuse_distillation else "no fuse distillation")  # fmt: skip
        return "\n".join([
            f"- LMS in: {', '.join(config.lms_points)}, every {config.lms_every} layer(s); rank {config.lms_rank}",
            f"- Synthesis: {synthesis}",
            f"- {route.capitalize()}",
        ])  # fmt: skip
    if config.model_type == "langspec_lsl":
        lines = []
        for stack in ("encoder", "decoder"):
            for side in ("source", "target"):
                layers = getattr(config, f"lsl_{stack}_{side}_layers")
                if layers:
                    lines.append(f"- {stack.capitalize()} layers {layers} (from 0): one per {side} language")
        preset = " (the paper's searched placement)" if config.lsl_preset == "paper" else ""
        return "\n".join(lines) + f"\n- Other layers shared{preset}; {config.num_languages} languages"
    if config.model_type == "langspec_cll":
        named = {"fcll": "every decoder layer (FCLL)", "sd": f"decoder layer {config.decoder_layers // 2} (SD)"}
        where = (
            named[config.cll_layers] if isinstance(config.cll_layers, str) else f"decoder layers {config.cll_layers}"
        )
        return "\n".join([
            f"- CLL in: {where}",
            f"- Central language: {config.central_language or 'none (every language has an LSL)'}",
            f"- LSL inner size {config.cll_inner_dim}, dropout {config.cll_dropout}, t_l initialised to {config.cll_scale_init}",
            f"- Encoder residuals removed: {config.encoder_drop_residual or 'none'}",
        ])  # fmt: skip
    if config.model_type != "langspec_clm":
        return ""
    lines = [
        f"- Encoder CLM: {CLM_VARIANT_NAMES[config.clm_encoder].format(key=config.clm_encoder_key)}",
        f"- Decoder CLM: {CLM_VARIANT_NAMES[config.clm_decoder].format(key=config.clm_decoder_key)}",
        f"- Placement: {'every sublayer' if config.clm_sublayers == 'all' else 'FFN sublayers only (CLM-top)'}",
        "- Normalisation: "
        + (
            "pre-LN form, z = h + mix(LN(h))"
            if getattr(config, "clm_norm", "post") == "pre"
            else "eq. 3, z = LN(h + mix(h))"
        ),
        f"- Features k = {config.clm_num_features}, smoothing alpha = {config.clm_alpha}"
        + (f", inference pruned to the top {config.clm_top_w}" if config.clm_top_w else ""),
        f"- Directions without trained parameters (zero-shot, pair-keyed mCLM): {config.clm_unseen_pair}",
    ]
    return "\n".join(lines)


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
    if config.model_type not in METHODS:
        raise ValueError(f"{model_dir} holds a {config.model_type!r} model; cards exist for {sorted(METHODS)}.")
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
        method_settings=method_settings(config),
        model_name=model_name,
        repo_id=repo_id,
        method_description=METHODS[config.model_type][0]
        + (" (with the XLM additive language embedding)" if config.language_embedding == "additive" else "")
        + ".",
        languages=config.languages,
        lang_tag_style=config.lang_tag_style,
        tag_explanation=TAG_EXPLANATION[config.lang_tag_style],
        architecture=f"Transformer ({norm}), {layers}, vocabulary {config.vocab_size}",
        train_summary=sizes,
        results_table=results_table(results) if results else "Not evaluated yet.",
        evaluation_note=evaluation_note(results),
        paper=paper or METHODS[config.model_type][1],
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
