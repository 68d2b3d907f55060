"""Model definitions. Every file here imports only its flat siblings, so a saved checkpoint carries them as remote code."""

from .configuration_langspec import LangSpecConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel, LangSpecPreTrainedModel

__all__ = ["LangSpecConfig", "LangSpecForConditionalGeneration", "LangSpecModel", "LangSpecPreTrainedModel"]
