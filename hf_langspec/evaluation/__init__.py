"""Evaluation: batched translation, sacreBLEU/chrF per direction, off-target rates, the papers' aggregates."""

from .evaluate import copy_baseline, evaluate_model, load_results, results_table, save_results
from .language_encoding import cross_language_similarity, plot_similarity, word_similarity
from .language_id import language_identifier, off_target_rate
from .metrics import corpus_scores, direction_groups, group_means, resource_groups, win_ratio
from .source_use import source_use
from .translate import translate

__all__ = [
    "copy_baseline",
    "corpus_scores",
    "cross_language_similarity",
    "direction_groups",
    "evaluate_model",
    "group_means",
    "language_identifier",
    "load_results",
    "off_target_rate",
    "plot_similarity",
    "resource_groups",
    "results_table",
    "save_results",
    "source_use",
    "translate",
    "win_ratio",
    "word_similarity",
]
