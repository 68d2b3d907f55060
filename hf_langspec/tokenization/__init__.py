"""The joint multilingual tokenizer with language tags, and how to train and extend it."""

from .tokenization_langspec import LangSpecTokenizer
from .training import changed_segmentations, extend_tokenizer, train_tokenizer

__all__ = ["LangSpecTokenizer", "changed_segmentations", "extend_tokenizer", "train_tokenizer"]
