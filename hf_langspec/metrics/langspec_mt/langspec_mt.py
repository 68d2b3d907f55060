"""langspec_mt: the papers' translation metrics per direction, with group means, as an `evaluate` module.

Inputs, one per example: `predictions`, `references`, `src_lang`, `tgt_lang` (language codes). Options:
`pivot` ("en": the en->xx / xx->en groups), `zero_shot` (directions of the zero-shot group; default: the
directions without the pivot), `off_target` (True: measure it for every direction; "zero-shot" (default):
for the zero-shot group), `language_identifier` (None: lingua, then py3langid, then langid, each language
by the first that covers it).

Output: `{"directions": {"en-de": {"bleu", "chrf", "chrfpp", "off_target"?, "sentences"}}, "groups":
{"bleu": {"en-xx": ...}, "chrfpp": {...}, "off_target": {...}}, "bleu" / "chrf" / "chrfpp": <means over
directions>, "off_target_not_measured": [directions]}`. BLEU is sacreBLEU's (13a,
exp smoothing), chrF++ is chrF with word order 2, the off-target rate the share of outputs the identifier
does not assign to the target language (empty outputs count as off-target).
"""

from collections import defaultdict
from statistics import mean

import datasets
import evaluate

from hf_langspec.data.checks import check_code
from hf_langspec.evaluation.language_id import language_identifier, off_target_rate
from hf_langspec.evaluation.metrics import corpus_scores, direction_groups, group_means

_CITATION = """\\
@inproceedings{post-2018-call,
  title = "A Call for Clarity in Reporting {BLEU} Scores",
  author = "Post, Matt",
  booktitle = "Proceedings of the Third Conference on Machine Translation",
  year = "2018",
}
"""


class LangspecMt(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation=_CITATION,
            inputs_description=__doc__,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Value("string"),
                    "src_lang": datasets.Value("string"),
                    "tgt_lang": datasets.Value("string"),
                }
            ),
            homepage="https://github.com/mjpost/sacrebleu",
        )

    def _compute(self, predictions, references, src_lang, tgt_lang, pivot="en", zero_shot=None, off_target="zero-shot",
                 language_identifier_name=None):  # fmt: skip
        if off_target not in (True, False, "zero-shot"):  # any other string measured nothing, without a word
            raise ValueError(f"off_target={off_target!r}: use True (every direction), False or 'zero-shot'.")
        if zero_shot is not None and not (
            isinstance(zero_shot, (list, tuple)) and all(isinstance(d, str) and d.count("-") == 1 for d in zero_shot)
        ):
            raise ValueError(f"zero_shot={zero_shot!r}: give a list of directions like ['de-fr', 'fr-de'], or None.")
        if not predictions:
            raise ValueError("No predictions: give at least one (prediction, reference, src_lang, tgt_lang).")
        for code in sorted(set(src_lang) | set(tgt_lang)):
            check_code(code, "src_lang/tgt_lang")
        by_direction = defaultdict(lambda: ([], []))
        for hyp, ref, src, tgt in zip(predictions, references, src_lang, tgt_lang, strict=True):
            if src == tgt:  # as the corpora refuse it: a direction joins two languages
                raise ValueError(
                    f"src_lang and tgt_lang are both {src!r}; a translation direction joins two languages."
                )
            hyps, refs = by_direction[f"{src}-{tgt}"]
            hyps.append(hyp.strip())
            refs.append(ref.strip())
        names = sorted(by_direction)
        if zero_shot is None:
            zero_shot = [d for d in names if pivot not in d.split("-")]
        groups = direction_groups(names, pivot=pivot, zero_shot=list(zero_shot))
        identify = language_identifier(language_identifier_name) if off_target else None
        directions, not_measured = {}, []
        for name in names:
            hyps, refs = by_direction[name]
            scores = corpus_scores(hyps, refs)
            entry = {
                "bleu": scores["bleu"],
                "chrf": scores["chrf"],
                "chrfpp": scores["chrfpp"],
                "sentences": len(hyps),
            }
            # a test without zero-shot directions has no such group (the default failed on it with a KeyError)
            if off_target is True or (off_target == "zero-shot" and name in groups.get("zero-shot", ())):
                rate = off_target_rate(hyps, name.split("-")[1], identify)
                if rate is None:
                    not_measured.append(name)
                else:
                    entry["off_target"] = rate
            directions[name] = entry
        result = {
            "directions": directions,
            "groups": {
                metric: group_means(directions, groups, metric)
                for metric in ("bleu", "chrf", "chrfpp", "off_target")
                if any(metric in entry for entry in directions.values())
            },
            **{metric: mean(entry[metric] for entry in directions.values()) for metric in ("bleu", "chrf", "chrfpp")},
            "off_target_not_measured": not_measured,
        }
        return result
