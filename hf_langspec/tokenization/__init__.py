"""The joint multilingual tokenizer with language tags, and how to train it."""

from .tokenization_langspec import LangSpecTokenizer
from .training import train_tokenizer

__all__ = ["LangSpecTokenizer", "train_tokenizer"]
