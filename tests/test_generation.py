"""generate() with language ids: beams, mixed directions, tag styles, pipelines."""

from __future__ import annotations

import pytest
import torch
from conftest import PAD, TAG_IDS, VOCAB, generation_inputs, random_batch, tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, pipeline


def test_every_decoding_step_gets_the_target_ids_of_every_beam():
    model = tiny_model(language_embedding="additive")
    batch = random_batch(batch=3, seed=2)
    batch["tgt_lang_ids"] = torch.tensor([2, 0, 3])
    seen = []
    model.model.decoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["tgt_lang_ids"].clone()), with_kwargs=True
    )
    model.generate(**generation_inputs(batch), num_beams=4, max_new_tokens=5, min_new_tokens=5)
    assert len(seen) == 5
    expected = torch.tensor([2] * 4 + [0] * 4 + [3] * 4)
    for step_ids in seen:
        assert torch.equal(step_ids, expected)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_mixed_directions_in_one_batch_decode_as_if_alone(num_beams):
    """Per-example routing: each row of a mixed batch decodes exactly as it does on its own."""
    model = tiny_model(language_embedding="additive", normalize_before=True)
    batch = random_batch(batch=4, seed=7)
    batch["src_lang_ids"] = torch.tensor([0, 1, 2, 3])
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 3, 0])
    kwargs = dict(num_beams=num_beams, max_new_tokens=8, min_new_tokens=8)
    together = model.generate(**generation_inputs(batch), **kwargs)
    for b in range(4):
        length = int(batch["attention_mask"][b].sum())
        alone = model.generate(
            input_ids=batch["input_ids"][b : b + 1, :length],
            src_lang_ids=batch["src_lang_ids"][b : b + 1],
            tgt_lang_ids=batch["tgt_lang_ids"][b : b + 1],
            **kwargs,
        )
        assert torch.equal(together[b], alone[0])


def test_target_language_changes_only_its_own_example():
    model = tiny_model(language_embedding="additive")
    batch = random_batch(batch=3, seed=4)
    batch["tgt_lang_ids"] = torch.tensor([0, 1, 2])
    before = model(**batch).logits
    batch["tgt_lang_ids"] = torch.tensor([0, 3, 2])
    after = model(**batch).logits
    torch.testing.assert_close(after[[0, 2]], before[[0, 2]])
    assert (after[1] - before[1]).abs().max() > 1e-3


@pytest.mark.parametrize("style", ["target", "both"])
def test_target_tag_style_starts_each_hypothesis_with_its_tag(style):
    model = tiny_model(lang_tag_style=style)
    batch = random_batch(batch=3, seed=1)
    batch["tgt_lang_ids"] = torch.tensor([3, 1, 2])
    out = model.generate(**generation_inputs(batch), num_beams=2, max_new_tokens=4)
    assert out[:, 0].tolist() == [model.config.decoder_start_token_id] * 3
    assert out[:, 1].tolist() == [TAG_IDS[3], TAG_IDS[1], TAG_IDS[2]]
    with pytest.raises(ValueError, match=r"lang_tag_style=.*needs `tgt_lang_ids`"):
        model.generate(input_ids=batch["input_ids"], max_new_tokens=2)


def test_missing_language_ids_name_the_module_that_needs_them():
    model = tiny_model(language_embedding="additive")
    batch = random_batch()
    del batch["tgt_lang_ids"]
    with pytest.raises(
        ValueError, match=r"additive language embedding \(language_embedding='additive'\) needs `tgt_lang_ids`"
    ):
        model(**batch)
    batch["tgt_lang_ids"] = torch.tensor([0, 1, 9])
    with pytest.raises(ValueError, match=r"tgt_lang_ids contains 9, outside \[0, 4\)"):
        model(**batch)


def _word_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<2en>", "<2de>", "<2fr>", "<2es>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    vocab.update({f"w{i}": i for i in range(len(specials), VOCAB)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=specials[4:],
    )


def test_translation_pipeline_applies_tags_and_language_ids():
    tokenizer = _word_tokenizer()
    assert tokenizer.pad_token_id == PAD
    model = tiny_model(language_embedding="additive")
    translate = pipeline("langspec-translation", model=model, tokenizer=tokenizer)
    results = translate(
        [
            {"text": "w10 w11 w12", "src_lang": "en", "tgt_lang": "de"},
            {"text": "w40 w41", "src_lang": "es", "tgt_lang": "fr"},
        ],
        max_new_tokens=6,
        min_new_tokens=6,
        num_beams=2,
    )
    for text, (src, tgt), result in zip(["w10 w11 w12", "w40 w41"], [(0, 1), (3, 2)], results, strict=True):
        tagged = tokenizer(f"<2{model.config.languages[tgt]}> {text}", return_tensors="pt")
        direct = model.generate(
            **tagged,
            src_lang_ids=torch.tensor([src]),
            tgt_lang_ids=torch.tensor([tgt]),
            max_new_tokens=6,
            min_new_tokens=6,
            num_beams=2,
        )
        assert result[0]["translation_text"] == tokenizer.decode(direct[0], skip_special_tokens=True)
        assert result[0]["translation_text"].strip()
    with pytest.raises(ValueError, match="Pass tgt_lang=<code>"):
        translate("w10 w11")
    with pytest.raises(ValueError, match="Unknown language code 'zz'"):
        translate("w10", tgt_lang="zz")


def test_the_pipeline_puts_the_source_languages_tag_before_the_source_in_the_nllb_convention():
    """lang_tag_style="both" (NLLB-200, M2M-100): `[source code] text </s>` in, `[start, target code]` first out."""
    tokenizer = _word_tokenizer()
    model = tiny_model(lang_tag_style="both")
    translate = pipeline("langspec-translation", model=model, tokenizer=tokenizer)
    result = translate("w10 w11 w12", src_lang="es", tgt_lang="fr", max_new_tokens=5, min_new_tokens=5)
    tagged = tokenizer("<2es> w10 w11 w12", return_tensors="pt")
    direct = model.generate(**tagged, src_lang_ids=torch.tensor([3]), tgt_lang_ids=torch.tensor([2]),
                            max_new_tokens=5, min_new_tokens=5)  # fmt: skip
    assert direct[0, :2].tolist() == [model.config.decoder_start_token_id, TAG_IDS[2]]
    assert result[0]["translation_text"] == tokenizer.decode(direct[0], skip_special_tokens=True)
    with pytest.raises(ValueError, match=r"lang_tag_style='both'\): pass src_lang=<code>"):
        translate("w10 w11", tgt_lang="fr")


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("inputs", "options", "message"),
    [
        (5, {"tgt_lang": "de"}, r"Input 0 is int 5; give a text, a \{'text', 'src_lang', 'tgt_lang'\} dict"),  # AttributeError
        ([{"src_lang": "en"}], {"tgt_lang": "de"}, r"Input 0 is dict"),  # a KeyError
        (["w10", "w11"], {"tgt_lang": ["de"]}, r"tgt_lang=\['de'\]: give one code for every input, or per input"),  # unhashable
        ("w10", {"tgt_lang": "de", "num_beams": 0}, r"num_beams=0 must be a whole number of at least 1"),  # ZeroDivisionError
    ],
)  # fmt: skip
def test_bad_pipeline_inputs_are_one_clear_error(inputs, options, message):
    translate = pipeline(
        "langspec-translation", model=tiny_model(language_embedding="additive"), tokenizer=_word_tokenizer()
    )
    with pytest.raises(ValueError, match=message):
        translate(inputs, **options)


def test_the_removed_translation_task_is_still_removed_upstream():
    """Documents why the pipeline above exists: transformers 5 raises for pipeline("translation")."""
    with pytest.raises(KeyError, match="translation"):  # "has been removed" (5.2x), "Unknown task" (5.17)
        pipeline("translation", model=tiny_model(), tokenizer=_word_tokenizer())
