"""Writes the tiny suite's toy corpus (run once; the files are committed): de is the English words
reversed, fr the English words upper-cased, so de<->fr (reverse and change case) is never trained."""

import json
import random
from pathlib import Path

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
]
HERE = Path(__file__).parent


def sentence(rng: random.Random) -> dict[str, str]:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 7))]
    return {"en": " ".join(words), "de": " ".join(reversed(words)), "fr": " ".join(words).upper()}


def pairs(records, directions):
    return [{"src_lang": s, "tgt_lang": t, "src": r[s], "tgt": r[t]} for s, t in directions for r in records]


def write(name, rows):
    (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


rng = random.Random(0)
supervised = [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")]
write("train.jsonl", pairs([sentence(rng) for _ in range(300)], supervised))
write("valid.jsonl", pairs([sentence(rng) for _ in range(8)], supervised))
test = [sentence(rng) for _ in range(12)]
write("test.jsonl", pairs(test, supervised))
write("test.zeroshot.jsonl", pairs(test, [("de", "fr"), ("fr", "de")]))
write("test.multiway.jsonl", [{"ref": str(i), "texts": r} for i, r in enumerate(test[:6])])
