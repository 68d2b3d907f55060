"""Text is text everywhere (issue 59, item 4): a line ends at a line feed only, in every line-oriented reader and
in `translate`'s input, so one input line gives one output line and a Moses pair stays aligned; a text of
whitespace and invisible characters only is blank."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_langspec.data.local import read_moses_pairs, read_sentences
from hf_langspec.data.text import is_blank, split_lines

# what str.splitlines() and Python's text mode also split at, and what occurs inside real sentences
INNER_BREAKS = ["\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u202e", "\ufe0f", "\u3164"]
line_text = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=12).filter(
    lambda line: not line.endswith("\r")
)


@given(st.lists(line_text, max_size=8), st.booleans())
def test_split_lines_gives_back_the_lines_joined_by_line_feeds(lines, crlf):
    text = ("\r\n" if crlf else "\n").join(lines) + ("\n" if lines else "")
    assert split_lines(text) == lines


@pytest.mark.parametrize("brk", INNER_BREAKS)
def test_a_moses_pair_with_a_break_inside_a_line_stays_aligned(tmp_path, brk):
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_bytes(f"one{brk}half\ntwo\n".encode())
    tgt.write_bytes(b"eins\nzwei\r\n")
    rows = list(read_moses_pairs(src, tgt, "en", "de"))
    assert [(r["src"], r["tgt"]) for r in rows] == [(f"one{brk}half", "eins"), ("two", "zwei")]


def test_a_line_of_invisible_characters_is_a_blank_line(tmp_path):
    path = tmp_path / "mono.txt"
    path.write_text("first\n\u200b\u2060 \ufeff\nthird\n")
    with pytest.raises(ValueError, match=r"mono\.txt:2: empty line"):
        read_sentences(path)


@given(st.lists(st.sampled_from([*INVISIBLE, " ", "\t", "\u3000", "\xa0"]), max_size=6))
def test_whitespace_and_invisible_characters_alone_are_blank(chars):
    text = "".join(chars)
    assert is_blank(text) and not is_blank(text + "a") and not is_blank("é" + text)


def test_translate_gives_one_output_line_per_input_line_and_blank_for_invisible_lines(tmp_path):
    """The CLI split its input with str.splitlines(): a U+2028 or a lone \\r inside a sentence made two outputs,
    and every later output answered the wrong input line."""
    from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration
    from hf_langspec.tokenization import train_tokenizer
    from hf_langspec_cli import main

    texts = [
        {"src_lang": "en", "tgt_lang": "de", "src": f"the word {i} was", "tgt": f"das wort {i} war"} for i in range(30)
    ]
    tokenizer = train_tokenizer(texts, vocab_size=60, show_progress=False)
    config = LangSpecConfig(**tokenizer.model_config_kwargs(), d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                            decoder_ffn_dim=16)  # fmt: skip
    LangSpecForConditionalGeneration(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    lines = ["the word", f"the{INNER_BREAKS[7]}word", "was\rthe", "\u200b\ufeff", "word\x85was", "the"]
    (tmp_path / "in.txt").write_bytes(("\n".join(lines) + "\n").encode())
    args = ["translate", str(tmp_path / "model"), "--src-lang", "en", "--tgt-lang", "de", "--num-beams", "1",
            "--max-new-tokens", "3", "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")]  # fmt: skip
    assert main(args) == 0
    outputs = split_lines((tmp_path / "out.txt").read_text())
    assert len(outputs) == len(lines) and outputs[3] == ""  # the invisible line: blank, not a made-up sentence
