"""hf_langspec: language-specific capacity for multilingual NMT, on the Hugging Face stack.

Importing the package registers every config and model with the Auto classes.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from .export.specialize import specialize
from .modeling import (
    AdapterConfig,
    AdapterForConditionalGeneration,
    AdapterModel,
    CLLConfig,
    CLLForConditionalGeneration,
    CLLModel,
    CLMConfig,
    CLMForConditionalGeneration,
    CLMModel,
    HLTConfig,
    HLTForConditionalGeneration,
    HLTModel,
    LAAConfig,
    LAAForConditionalGeneration,
    LAAModel,
    LangSpecConfig,
    LangSpecForConditionalGeneration,
    LangSpecModel,
    LangSpecPreTrainedModel,
    LMSConfig,
    LMSForConditionalGeneration,
    LMSModel,
    LoRAConfig,
    LoRAForConditionalGeneration,
    LoRAModel,
    LSLConfig,
    LSLForConditionalGeneration,
    LSLModel,
    XLPConfig,
    XLPForConditionalGeneration,
    XLPForMaskedLM,
    XLPForSequenceClassification,
    XLPModel,
    XLPMTConfig,
    XLPMTModel,
)
from .modeling.registry import VARIANTS, Variant
from .pipelines import LangSpecTranslationPipeline, register_pipeline
from .tokenization import LangSpecTokenizer, train_tokenizer

__version__ = "0.1.0"


def _register() -> None:
    for variant in VARIANTS:
        config_class, model_class, seq2seq_class = variant.config_class, variant.model_class, variant.translation_class
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
        AutoModelForSeq2SeqLM.register(config_class, seq2seq_class, exist_ok=True)
        AutoTokenizer.register(config_class, tokenizer_class=LangSpecTokenizer, exist_ok=True)
        # saved checkpoints carry their modeling code and load with trust_remote_code=True
        config_class.register_for_auto_class()
        model_class.register_for_auto_class("AutoModel")
        seq2seq_class.register_for_auto_class("AutoModelForSeq2SeqLM")
    # the XLP encoder family (encoder-only: no seq2seq class)
    AutoConfig.register(XLPConfig.model_type, XLPConfig, exist_ok=True)
    for auto, model_class in ((AutoModel, XLPModel), (AutoModelForMaskedLM, XLPForMaskedLM),
                              (AutoModelForSequenceClassification, XLPForSequenceClassification)):  # fmt: skip
        auto.register(XLPConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto.__name__)
    XLPConfig.register_for_auto_class()
    LangSpecTokenizer.register_for_auto_class("AutoTokenizer")
    register_pipeline()


_register()

__all__ = [
    "VARIANTS",
    "AdapterConfig",
    "AdapterForConditionalGeneration",
    "AdapterModel",
    "CLLConfig",
    "CLLForConditionalGeneration",
    "CLLModel",
    "CLMConfig",
    "CLMForConditionalGeneration",
    "CLMModel",
    "HLTConfig",
    "HLTForConditionalGeneration",
    "HLTModel",
    "LAAConfig",
    "LAAForConditionalGeneration",
    "LAAModel",
    "LMSConfig",
    "LMSForConditionalGeneration",
    "LMSModel",
    "LSLConfig",
    "LSLForConditionalGeneration",
    "LSLModel",
    "LangSpecConfig",
    "LangSpecForConditionalGeneration",
    "LangSpecModel",
    "LangSpecPreTrainedModel",
    "LangSpecTokenizer",
    "LangSpecTranslationPipeline",
    "LoRAConfig",
    "LoRAForConditionalGeneration",
    "LoRAModel",
    "Variant",
    "XLPConfig",
    "XLPForConditionalGeneration",
    "XLPForMaskedLM",
    "XLPForSequenceClassification",
    "XLPMTConfig",
    "XLPMTModel",
    "XLPModel",
    "specialize",
    "train_tokenizer",
]
