"""hf_langspec: language-specific capacity for multilingual NMT, on the Hugging Face stack.

Importing the package registers every config and model with the Auto classes.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

from .modeling import LangSpecConfig, LangSpecForConditionalGeneration, LangSpecModel, LangSpecPreTrainedModel
from .pipelines import LangSpecTranslationPipeline, register_pipeline
from .tokenization import LangSpecTokenizer, train_tokenizer

__version__ = "0.1.0"


def _register() -> None:
    AutoConfig.register(LangSpecConfig.model_type, LangSpecConfig, exist_ok=True)
    AutoModel.register(LangSpecConfig, LangSpecModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(LangSpecConfig, LangSpecForConditionalGeneration, exist_ok=True)
    AutoTokenizer.register(LangSpecConfig, tokenizer_class=LangSpecTokenizer, exist_ok=True)
    # saved checkpoints carry their modeling code and load with trust_remote_code=True
    LangSpecConfig.register_for_auto_class()
    LangSpecModel.register_for_auto_class("AutoModel")
    LangSpecForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
    LangSpecTokenizer.register_for_auto_class("AutoTokenizer")
    register_pipeline()


_register()

__all__ = [
    "LangSpecConfig",
    "LangSpecForConditionalGeneration",
    "LangSpecModel",
    "LangSpecPreTrainedModel",
    "LangSpecTokenizer",
    "LangSpecTranslationPipeline",
    "train_tokenizer",
]
