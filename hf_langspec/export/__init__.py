"""Sharing: model cards and pushing to the Hub."""

from .card import build_model_card, write_model_card
from .push import push_model

__all__ = ["build_model_card", "push_model", "write_model_card"]
