"""The XLP encoder family: masked language modelling and sentence classification with frozen projections."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    DataCollatorForLanguageModeling,
)

from hf_langspec import XLPConfig, XLPForMaskedLM, XLPForSequenceClassification, XLPModel, train_tokenizer

WORDS = {
    "en": [
        "the",
        "man",
        "saw",
        "a",
        "dog",
        "and",
        "the",
        "woman",
        "saw",
        "a",
        "cat",
        "in",
        "the",
        "house",
        "near",
        "the",
        "river",
    ],
    "de": [
        "der",
        "mann",
        "sah",
        "einen",
        "hund",
        "und",
        "die",
        "frau",
        "sah",
        "eine",
        "katze",
        "im",
        "haus",
        "nahe",
        "dem",
        "fluss",
    ],
    "fr": [
        "le",
        "homme",
        "vit",
        "un",
        "chien",
        "et",
        "la",
        "femme",
        "vit",
        "un",
        "chat",
        "dans",
        "la",
        "maison",
        "près",
        "du",
        "fleuve",
    ],
}


def sentences(code: str, n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    words = WORDS[code]
    return [" ".join(words[j] for j in torch.randint(0, len(words), (6,), generator=g)) for _ in range(n)]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer({c: sentences(c, 40, 0) for c in WORDS}, languages=list(WORDS), vocab_size=120,
                           lang_tag_style="none", mask_token=True, show_progress=False)  # fmt: skip


def config(tok, **overrides) -> XLPConfig:
    kwargs = tok.model_config_kwargs() | dict(d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                                              dropout=0.0, mask_token_id=tok.mask_token_id, num_labels=3)  # fmt: skip
    return XLPConfig(**kwargs | overrides)


def features(tok, code: str, texts: list[str]) -> list[dict]:
    encoded = tok(texts, src_lang=code)
    return [
        {"input_ids": ids, "src_lang_ids": lid}
        for ids, lid in zip(encoded["input_ids"], encoded["src_lang_ids"], strict=True)
    ]


def test_identity_projections_equal_the_encoder_without_language_signal(tok):
    torch.manual_seed(0)
    plain = XLPModel(config(tok, language_encoding="none")).eval()
    xlp = XLPModel(config(tok)).eval()
    missing, unexpected = xlp.load_state_dict(plain.state_dict(), strict=False)
    assert missing == ["encoder.insertions.embed.weight"] and not unexpected
    batch = tok(sentences("de", 3, 5), src_lang="de", padding=True, return_tensors="pt")
    torch.testing.assert_close(xlp(**batch).last_hidden_state, plain(**batch).last_hidden_state, atol=1e-6, rtol=0)


def test_mlm_training_lowers_the_held_out_loss_of_every_language(tok):
    torch.manual_seed(0)
    model = XLPForMaskedLM(config(tok))
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
    train = [f for code in WORDS for f in features(tok, code, sentences(code, 64, 1))]
    held_out = {code: features(tok, code, sentences(code, 32, 2)) for code in WORDS}

    def held_out_loss(code: str) -> float:
        torch.manual_seed(123)  # the same masks before and after training
        model.eval()
        with torch.no_grad():
            return model(**collator(held_out[code])).loss.item()

    before = {code: held_out_loss(code) for code in WORDS}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(60):
        torch.manual_seed(step)
        batch = collator([train[i] for i in torch.randint(0, len(train), (32,)).tolist()])
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    after = {code: held_out_loss(code) for code in WORDS}
    for code in WORDS:
        assert after[code] < 0.8 * before[code], (code, before[code], after[code])
    # pre-training trains the projections (only classification fine-tuning freezes them)
    assert not torch.equal(model.model.language_projection().weight, torch.eye(32).expand(3, 32, 32))


@pytest.mark.parametrize("freeze", [True, False])
def test_classification_fine_tuning_keeps_frozen_projections_bit_identical(tok, freeze, tmp_path):
    torch.manual_seed(0)
    XLPForSequenceClassification(config(tok, freeze_language_projections=freeze)).save_pretrained(tmp_path)
    # loaded, as fine-tuning starts from a pre-trained checkpoint (loading resets requires_grad)
    model = XLPForSequenceClassification.from_pretrained(tmp_path)
    projections = model.model.language_projection().weight.detach().clone()
    classifier = model.classifier.weight.detach().clone()
    texts, labels, langs = [], [], []
    for k, code in enumerate(WORDS):
        for i, text in enumerate(sentences(code, 8, 3 + k)):
            texts.append(text)
            labels.append(i % 3)
            langs.append(code)
    batch = tok(texts, src_lang=langs, padding=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(5):
        model(**batch, labels=torch.tensor(labels)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert torch.equal(model.model.language_projection().weight, projections) == freeze
    assert not torch.equal(model.classifier.weight, classifier)


def test_encoder_family_round_trips_through_the_auto_classes(tok, tmp_path):
    batch = tok(sentences("fr", 2, 7), src_lang="fr", padding=True, return_tensors="pt")
    for cls, auto in (
        (XLPModel, AutoModel),
        (XLPForMaskedLM, AutoModelForMaskedLM),
        (XLPForSequenceClassification, AutoModelForSequenceClassification),
    ):
        torch.manual_seed(1)
        model = cls(config(tok)).eval()
        model.save_pretrained(tmp_path / cls.__name__)
        loaded = auto.from_pretrained(tmp_path / cls.__name__).eval()
        assert type(loaded) is cls
        first = model(**batch)[0] if cls is XLPModel else model(**batch).logits
        again = loaded(**batch)[0] if cls is XLPModel else loaded(**batch).logits
        torch.testing.assert_close(again, first, atol=0, rtol=0)


def test_encoder_config_errors():
    with pytest.raises(ValueError, match="language_encoding='tags' is not supported"):
        XLPConfig(language_encoding="tags", languages=["en"])
    with pytest.raises(ValueError, match="needs `languages`"):
        XLPConfig(languages=[])


REMOTE = """
import json, sys, torch
from transformers import AutoModelForSequenceClassification

model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
batch = {k: torch.tensor(v) for k, v in json.loads(sys.argv[2]).items()}
print(json.dumps({"class": type(model).__module__ + "." + type(model).__name__, "logits": model(**batch).logits.tolist()}))
"""


@pytest.mark.slow
def test_a_classifier_loads_as_remote_code_in_a_fresh_process(tok, tmp_path):
    import json

    from conftest import run_without_package

    torch.manual_seed(2)
    model = XLPForSequenceClassification(config(tok)).eval()
    model.save_pretrained(tmp_path / "clf")
    batch = tok(sentences("de", 2, 9), src_lang="de", padding=True, return_tensors="pt")
    out = run_without_package(
        REMOTE, tmp_path / "clf", json.dumps({k: v.tolist() for k, v in batch.items()}), cwd=tmp_path
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["class"].startswith("transformers_modules.") and result["class"].endswith(
        "modeling_xlp.XLPForSequenceClassification"
    )
    torch.testing.assert_close(torch.tensor(result["logits"]), model(**batch).logits, atol=1e-6, rtol=0)
