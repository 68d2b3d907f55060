"""The one registry of the package's model variants: each method's `model.class` name, its config, its bare
encoder-decoder and its translation model. Adding a method is one `Variant(...)` line here: the config schema
(`model.class`), interop, pretrained starts, checked loading and the Auto classes all read this list.
"""

from __future__ import annotations

from dataclasses import dataclass

from .configuration_adapter import AdapterConfig
from .configuration_cll import CLLConfig
from .configuration_clm import CLMConfig
from .configuration_hlt import HLTConfig
from .configuration_laa import LAAConfig
from .configuration_langspec import LangSpecConfig
from .configuration_lms import LMSConfig
from .configuration_lora import LoRAConfig
from .configuration_lsl import LSLConfig
from .configuration_xlp_mt import XLPMTConfig
from .modeling_adapter import AdapterForConditionalGeneration, AdapterModel
from .modeling_cll import CLLForConditionalGeneration, CLLModel
from .modeling_clm import CLMForConditionalGeneration, CLMModel
from .modeling_hlt import HLTForConditionalGeneration, HLTModel
from .modeling_laa import LAAForConditionalGeneration, LAAModel
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .modeling_lms import LMSForConditionalGeneration, LMSModel
from .modeling_lora import LoRAForConditionalGeneration, LoRAModel
from .modeling_lsl import LSLForConditionalGeneration, LSLModel
from .modeling_xlp_mt import XLPForConditionalGeneration, XLPMTModel

# the papers (a card's citation)
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

# what each model is, as its card says
BASELINE_DESCRIPTION = (
    "the multilingual Transformer of Johnson et al. (2017), the baseline every method of the package is compared with"
)
XLP_DESCRIPTION = (
    "the multilingual Transformer with cross-lingual language projections (XLP, Luo et al. 2021): the encoder "
    "projects token embeddings with a d x d matrix of the source language, the decoder with one of the target language"
)
CLM_DESCRIPTION = (
    "the multilingual Transformer with token-level cross-lingual feature mixing (CLM, Liu et al. 2022): after "
    "its sublayers, each token is mixed from k shared linear maps with proportions computed from the token itself"
)
LAA_DESCRIPTION = (
    "the multilingual Transformer with informative language representations (Jin and Xiong 2022): the target "
    "language's embedding embodied at chosen switching points (LEE) and/or a d x d language matrix added to the "
    "attention projections (LAA)"
)
CLL_DESCRIPTION = (
    "the multilingual Transformer with central-language-aware layers (CLL, Qu and Watanabe 2022): decoder FFNs "
    "gain a small language-specific FFN, scaled by a learned t_l, for every non-central target language"
)
HLT_DESCRIPTION = (
    "the multilingual Transformer with HLT-MT's selective language-specific pool (Yang et al. 2022): adapters "
    "after the decoder, one per group of high-resource target languages and a universal one for the others"
)
ADAPTER_DESCRIPTION = (
    "the multilingual Transformer with per-language adapters, the adapter-family baseline (Bapna and Firat "
    "2019; monolingual adapters of Philip et al. 2020; LS-MNMT's language-specific layers of Fan et al.)"
)
LORA_DESCRIPTION = (
    "the multilingual Transformer with language-specific LoRA: a low-rank update (alpha / r) B A of the attention "
    "projections for each language, the encoder's chosen by the source language and the decoder's by the target"
)
LSL_DESCRIPTION = (
    "the multilingual Transformer with language-specific Transformer layers (LSL, Pires et al. 2023): at chosen "
    "positions a layer per language, chosen by each example's source or target language, the other layers shared"
)
LMS_DESCRIPTION = (
    "the multilingual Transformer with language-specific matrix synthesis (LMS, Xu et al. 2023): each chosen "
    "projection W gains a low-rank W_v W_f of the example's languages, optionally condensed by fuse distillation "
    "into one shared pair that inference uses alone"
)


@dataclass(frozen=True)
class Variant:
    """One method: `name` is its `model.class` in a config; the classes are what the Auto classes map to."""

    name: str
    config_class: type
    model_class: type  # the bare encoder-decoder (AutoModel)
    translation_class: type  # the translation model (AutoModelForSeq2SeqLM)
    description: str  # what a model card says the model is (its settings: the config's `card_settings()`)
    citation: str  # the paper a card and the README cite


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "baseline", LangSpecConfig, LangSpecModel, LangSpecForConditionalGeneration, BASELINE_DESCRIPTION, JOHNSON
    ),
    Variant("xlp", XLPMTConfig, XLPMTModel, XLPForConditionalGeneration, XLP_DESCRIPTION, LUO),
    Variant("clm", CLMConfig, CLMModel, CLMForConditionalGeneration, CLM_DESCRIPTION, LIU),
    Variant("laa", LAAConfig, LAAModel, LAAForConditionalGeneration, LAA_DESCRIPTION, JIN),
    Variant("cll", CLLConfig, CLLModel, CLLForConditionalGeneration, CLL_DESCRIPTION, QU),
    Variant("hlt", HLTConfig, HLTModel, HLTForConditionalGeneration, HLT_DESCRIPTION, YANG),
    Variant("adapter", AdapterConfig, AdapterModel, AdapterForConditionalGeneration, ADAPTER_DESCRIPTION, BAPNA),
    Variant("lora", LoRAConfig, LoRAModel, LoRAForConditionalGeneration, LORA_DESCRIPTION, HU),
    Variant("lsl", LSLConfig, LSLModel, LSLForConditionalGeneration, LSL_DESCRIPTION, PIRES),
    Variant("lms", LMSConfig, LMSModel, LMSForConditionalGeneration, LMS_DESCRIPTION, XU),
)


def model_classes() -> dict[str, tuple[type, type]]:
    """`model.class` values: (config class, translation model class) of every variant, in the registry's order."""
    return {variant.name: (variant.config_class, variant.translation_class) for variant in VARIANTS}


def variant(name: str) -> Variant:
    """The variant a config's `model.class` names, or a ValueError listing the known ones."""
    for known in VARIANTS:
        if known.name == name:
            return known
    raise ValueError(f"Unknown method {name!r}; choose one of {sorted(v.name for v in VARIANTS)}.")


def variants_by_model_type() -> dict[str, Variant]:
    """`{config.json's model_type: variant}` of every translation model."""
    return {variant.config_class.model_type: variant for variant in VARIANTS}


def config_classes_by_model_type() -> dict[str, type]:
    """`{config.json's model_type: config class}` of every variant."""
    return {variant.config_class.model_type: variant.config_class for variant in VARIANTS}


__all__ = ["VARIANTS", "Variant", "config_classes_by_model_type", "model_classes", "variant", "variants_by_model_type"]
