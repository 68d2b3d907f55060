"""Sharing and serving: specialization into plain models, model cards, pushing to the Hub."""

from .card import build_model_card, write_model_card
from .push import push_model
from .specialize import Specialized, specialize, specialize_tokenizer

__all__ = ["Specialized", "build_model_card", "push_model", "specialize", "specialize_tokenizer", "write_model_card"]
