"""The `langspec_mt` evaluate module: loads offline by path in a fresh process; its numbers are sacreBLEU's and the detector's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sacrebleu

from hf_langspec import metrics
from hf_langspec.evaluation.language_id import language_identifier

pytest.importorskip("evaluate")

ROWS = [  # (src, tgt, hypothesis, reference)
    ("en", "de", "Im Anfang schuf Gott Himmel und Erde.", "Im Anfang schuf Gott die Himmel und die Erde."),
    ("en", "de", "Und die Erde war wüst und leer.", "Und die Erde war wüst und leer."),
    ("de", "en", "And God said: let there be light.", "And God said, Let there be light: and there was light."),
    ("de", "fr", "And God saw the light, that it was good.", "Et Dieu vit que la lumière était bonne."),
    ("de", "fr", "Et Dieu appela la lumière jour.", "Dieu appela la lumière jour, et il appela les ténèbres nuit."),
]
LOAD = """
import json, sys
import evaluate
module = evaluate.load(sys.argv[1])
rows = json.loads(sys.argv[2])
result = module.compute(predictions=[r[2] for r in rows], references=[r[3] for r in rows],
                        src_lang=[r[0] for r in rows], tgt_lang=[r[1] for r in rows])
print(json.dumps(result))
"""


def test_the_module_loads_offline_in_a_fresh_process_and_equals_sacrebleu_and_the_detector(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", LOAD, metrics.path("langspec_mt"), json.dumps(ROWS)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    identify = language_identifier()
    for direction in ("en-de", "de-en", "de-fr"):
        src, tgt = direction.split("-")
        hyps = [r[2] for r in ROWS if r[:2] == (src, tgt)]
        refs = [r[3] for r in ROWS if r[:2] == (src, tgt)]
        scores = result["directions"][direction]
        assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
        assert scores["chrfpp"] == pytest.approx(sacrebleu.metrics.CHRF(word_order=2).corpus_score(hyps, [refs]).score)
        if direction == "de-fr":  # the zero-shot direction: off-target measured, by lingua for French
            found = identify.for_language("fr")(hyps)
            assert scores["off_target"] == pytest.approx(sum(code != "fr" for code in found) / len(hyps)) == 0.5
        else:
            assert "off_target" not in scores
    assert result["groups"]["bleu"] == {"en-xx": result["directions"]["en-de"]["bleu"],
                                        "xx-en": result["directions"]["de-en"]["bleu"],
                                        "zero-shot": result["directions"]["de-fr"]["bleu"]}  # fmt: skip
    assert result["bleu"] == pytest.approx(sum(result["directions"][d]["bleu"] for d in result["directions"]) / 3)


def test_an_unknown_module_name_lists_the_shipped_ones():
    with pytest.raises(ValueError, match=r"this package ships \['langspec_mt'\]"):
        metrics.path("bleu")


@pytest.fixture(scope="module")
def module():
    import evaluate

    return evaluate.load(metrics.path("langspec_mt"))


def test_a_test_without_zero_shot_directions_is_scored_with_the_defaults(module):
    """The default off_target="zero-shot" looked up a zero-shot group that a supervised-only test does not have."""
    rows = [r for r in ROWS if "en" in r[:2]]
    result = module.compute(predictions=[r[2] for r in rows], references=[r[3] for r in rows],
                            src_lang=[r[0] for r in rows], tgt_lang=[r[1] for r in rows])  # fmt: skip
    hyps = [r[2] for r in rows if r[:2] == ("en", "de")]
    refs = [r[3] for r in rows if r[:2] == ("en", "de")]
    assert result["directions"]["en-de"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert set(result["groups"]["bleu"]) == {"en-xx", "xx-en"} and "off_target" not in result["groups"]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"off_target": "nonsense"}, r"off_target='nonsense': use True \(every direction\), False or 'zero-shot'"),
        ({"zero_shot": "de-fr"}, r"zero_shot='de-fr': give a list of directions like \['de-fr', 'fr-de'\]"),
        ({"src_lang": ["EN"]}, r"'EN' is not a language code; use ISO 639 in lowercase"),
        ({"tgt_lang": ["en"]}, r"src_lang and tgt_lang are both 'en'"),
        ({"predictions": [], "references": [], "src_lang": [], "tgt_lang": []}, r"No predictions: give at least one"),
    ],
)  # fmt: skip
def test_bad_options_and_inputs_are_one_clear_error(module, change, message):
    """Each measured nothing without a word, or failed inside the module (KeyError, StatisticsError)."""
    inputs = {"predictions": ["Hallo Welt"], "references": ["Hallo Welt"], "src_lang": ["en"], "tgt_lang": ["de"]}
    with pytest.raises(ValueError, match=message):
        module.compute(**{**inputs, **change})
