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


@dataclass(frozen=True)
class Variant:
    """One method: `name` is its `model.class` in a config; the classes are what the Auto classes map to."""

    name: str
    config_class: type
    model_class: type  # the bare encoder-decoder (AutoModel)
    translation_class: type  # the translation model (AutoModelForSeq2SeqLM)


VARIANTS: tuple[Variant, ...] = (
    Variant("baseline", LangSpecConfig, LangSpecModel, LangSpecForConditionalGeneration),
    Variant("xlp", XLPMTConfig, XLPMTModel, XLPForConditionalGeneration),
    Variant("clm", CLMConfig, CLMModel, CLMForConditionalGeneration),
    Variant("laa", LAAConfig, LAAModel, LAAForConditionalGeneration),
    Variant("cll", CLLConfig, CLLModel, CLLForConditionalGeneration),
    Variant("hlt", HLTConfig, HLTModel, HLTForConditionalGeneration),
    Variant("adapter", AdapterConfig, AdapterModel, AdapterForConditionalGeneration),
    Variant("lora", LoRAConfig, LoRAModel, LoRAForConditionalGeneration),
    Variant("lsl", LSLConfig, LSLModel, LSLForConditionalGeneration),
    Variant("lms", LMSConfig, LMSModel, LMSForConditionalGeneration),
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


def config_classes_by_model_type() -> dict[str, type]:
    """`{config.json's model_type: config class}` of every variant."""
    return {variant.config_class.model_type: variant.config_class for variant in VARIANTS}


__all__ = ["VARIANTS", "Variant", "config_classes_by_model_type", "model_classes", "variant"]
