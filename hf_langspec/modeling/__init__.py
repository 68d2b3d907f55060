"""Model definitions. Every file here imports only its flat siblings, so a saved checkpoint carries them as remote code."""

from .configuration_adapter import ADAPTER_PRESETS, AdapterConfig
from .configuration_cll import CLLConfig
from .configuration_clm import CLMConfig
from .configuration_hlt import HLTConfig
from .configuration_laa import LAAConfig
from .configuration_langspec import LangSpecConfig
from .configuration_lms import LMSConfig
from .configuration_lora import LoRAConfig
from .configuration_lsl import LSLConfig
from .configuration_xlp import XLPConfig
from .configuration_xlp_mt import XLPMTConfig
from .modeling_adapter import AdapterForConditionalGeneration, AdapterModel
from .modeling_cll import CLLForConditionalGeneration, CLLModel
from .modeling_clm import CLMForConditionalGeneration, CLMModel
from .modeling_hlt import HLTForConditionalGeneration, HLTModel
from .modeling_laa import LAAForConditionalGeneration, LAAModel
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel, LangSpecPreTrainedModel
from .modeling_lms import LMSForConditionalGeneration, LMSModel
from .modeling_lora import LoRAForConditionalGeneration, LoRAModel
from .modeling_lsl import LSLForConditionalGeneration, LSLModel
from .modeling_xlp import XLPForMaskedLM, XLPForSequenceClassification, XLPModel
from .modeling_xlp_mt import XLPForConditionalGeneration, XLPMTModel

__all__ = [
    "ADAPTER_PRESETS",
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
    "LoRAConfig",
    "LoRAForConditionalGeneration",
    "LoRAModel",
    "XLPConfig",
    "XLPForConditionalGeneration",
    "XLPForMaskedLM",
    "XLPForSequenceClassification",
    "XLPMTConfig",
    "XLPMTModel",
    "XLPModel",
]
