"""Sharing and serving: folding a direction into plain models (transformers, CTranslate2), the HTTP server,
model cards, pushing to the Hub."""

from .card import build_model_card, write_model_card
from .push import push_model
from .specialize import Folded, Specialized, fold, specialize, specialize_tokenizer

__all__ = [
    "Folded",
    "Specialized",
    "build_model_card",
    "fold",
    "push_model",
    "specialize",
    "specialize_tokenizer",
    "write_model_card",
]
