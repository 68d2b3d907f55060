"""Shared helpers: tiny configs and random batches (d_model 32, 1-3 layers, vocab 120)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

import hf_langspec  # noqa: F401  (registers the Auto classes)
from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration

# where the device-aware tests (`-m device`, tests/test_device.py) run: one setting, cuda where present
DEVICE = torch.device(os.environ.get("HF_LANGSPEC_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
LANGUAGES = ["en", "de", "fr", "es"]
TAG_IDS = [4, 5, 6, 7]
VOCAB = 120
PAD = 1


# ---------------------------------------------------------------- a tiny NLLB-convention checkpoint (issue 45)
SHAPE = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, activation_function="relu",
             scale_embedding=True, dropout=0.1)  # fmt: skip


def nllb_shaped(**shape) -> Any:
    """A tiny random M2M100 with NLLB-200 dense's config fields (no LayerDrop, tied, relu, scaled embeddings);
    `shape` overrides `SHAPE`'s fields."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(0)
    config = M2M100Config(**(SHAPE | shape), encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True)
    return M2M100ForConditionalGeneration(config).eval()


CODES = ["eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn"]
TEXTS = ["the cat sat on the mat", "die Katze sass auf der Matte", "le chat etait sur le tapis", "el gato"] * 40


def nllb_tokenizer(codes=CODES):
    """NLLB-200's tokenizer class over a small BPE vocabulary (what transformers 5's NllbTokenizer holds), built
    without the Hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import NllbTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>", *codes]
    backend.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials))
    return NllbTokenizerFast(tokenizer_object=backend, src_lang=codes[0], tgt_lang=codes[1],
                             additional_special_tokens=list(codes))  # fmt: skip


def m2m100_tokenizer(folder: Path, model_type: str = "bpe") -> Any:
    """M2M-100's own (sentencepiece) tokenizer in miniature, written to `folder`: a SentencePiece model trained
    here and fairseq's dictionary over its pieces in another order than the model's (as fairseq's counts order it)."""
    import json
    import random

    import sentencepiece
    from transformers import M2M100Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.txt"
    extra = ["Numbers 123 and 4,567.9 — “quotes” ‘single’ ...", "Am Anfang schuf Gott Himmel und Erde."]
    corpus.write_text("\n".join((TEXTS[:4] + extra) * 30))
    size = 120 if model_type == "bpe" else 60
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "spm"), vocab_size=size, model_type=model_type,
        character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2,
    )  # fmt: skip
    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    encoder = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size()) if i != processor.unk_id()]
    random.Random(0).shuffle(pieces)
    encoder.update({piece: 4 + i for i, piece in enumerate(pieces)})
    (folder / "vocab.json").write_text(json.dumps(encoder))
    tokenizer = M2M100Tokenizer(vocab_file=str(folder / "vocab.json"), spm_file=str(folder / "spm.model"))
    for leftover in ("corpus.txt", "spm.vocab"):
        (folder / leftover).unlink()
    return tokenizer


def m2m100_checkpoint(folder: Path, model_type: str = "bpe") -> Path:
    """`folder` holding a tiny random M2M-100 and `m2m100_tokenizer`: rows for the dictionary, its 100 language
    codes and fairseq's 8 made-up words, as M2M-100 has."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    tokenizer = m2m100_tokenizer(folder, model_type)
    torch.manual_seed(0)
    shape = {**SHAPE, "vocab_size": len(tokenizer.encoder) + len(tokenizer.lang_token_to_id) + 8}
    config = M2M100Config(**shape, encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True)
    M2M100ForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


MARIAN_CODES = ["deu", "eng", "fra", "spa"]  # a mul-mul OPUS-MT model: a code for every target
MARIAN_SOURCES = ["the cat sat on the mat", "a dog and a cat", "Numbers 123 and 4,567.9 — “quotes” ..."]
MARIAN_TARGETS = ["die Katze sass auf der Matte", "le chat etait sur le tapis", "el gato",
                  "Am Anfang schuf Gott Himmel und Erde."]  # fmt: skip


def marian_tokenizer(folder: Path, model_type: str = "unigram", codes: list[str] = MARIAN_CODES) -> Any:
    """A multilingual OPUS-MT tokenizer in miniature, written to `folder`: two SentencePiece models trained here,
    `source.spm` on English and `target.spm` on the three target languages (so each lacks characters and pieces
    the other has), and Marian's shared `vocab.json` over both: `</s>`, `<unk>`, the `>>deu<<` codes (none for a
    model with one target language), the pieces in shuffled order, `<pad>` last."""
    import json
    import random

    import sentencepiece
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    pieces: dict[str, None] = {}
    for side, corpus in (("source", MARIAN_SOURCES), ("target", MARIAN_TARGETS)):
        (folder / "corpus.txt").write_text("\n".join(corpus * 30))
        sentencepiece.SentencePieceTrainer.train(
            input=str(folder / "corpus.txt"), model_prefix=str(folder / side), vocab_size=60, model_type=model_type,
            hard_vocab_limit=False, character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2,
        )  # fmt: skip
        (folder / f"{side}.model").rename(folder / f"{side}.spm")
        (folder / f"{side}.vocab").unlink()
        processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / f"{side}.spm"))
        pieces.update(dict.fromkeys(processor.id_to_piece(i) for i in range(1, processor.get_piece_size())))
    (folder / "corpus.txt").unlink()
    vocab = {"</s>": 0, "<unk>": 1, **{f">>{code}<<": 2 + i for i, code in enumerate(codes)}}
    ordered = list(pieces)
    random.Random(0).shuffle(ordered)
    vocab.update({piece: len(vocab) + i for i, piece in enumerate(ordered)})
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    return MarianTokenizer(source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
                           vocab=str(folder / "vocab.json"))  # fmt: skip


def marian_checkpoint(folder: Path, model_type: str = "unigram", codes: list[str] = MARIAN_CODES) -> Path:
    """`folder` holding a tiny random multilingual `MarianMTModel` (one shared embedding, decoding starts from
    `<pad>`, as OPUS-MT models do) and `marian_tokenizer`."""
    from transformers import MarianConfig, MarianMTModel

    tokenizer = marian_tokenizer(folder, model_type, codes)
    torch.manual_seed(0)
    pad = tokenizer.pad_token_id
    shape = {**SHAPE, "vocab_size": len(tokenizer), "pad_token_id": pad, "decoder_start_token_id": pad,
             "eos_token_id": 0, "bos_token_id": 0, "activation_function": "swish"}  # fmt: skip
    MarianMTModel(MarianConfig(**shape, share_encoder_decoder_embeddings=True)).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def nllb_checkpoint(folder: Path, codes=CODES, **shape) -> Path:
    """`folder` holding `nllb_shaped(**shape)` and `nllb_tokenizer(codes)`: an NLLB-200 checkpoint in miniature."""
    tokenizer = nllb_tokenizer(codes)
    model = nllb_shaped(**shape)
    assert len(tokenizer) <= model.config.vocab_size
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_config(config_class: type[LangSpecConfig] = LangSpecConfig, **overrides) -> LangSpecConfig:
    kwargs = dict(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=48,
        max_position_embeddings=64,
        dropout=0.0,
        languages=LANGUAGES,
        lang_tag_token_ids=TAG_IDS,
    )
    kwargs.update(overrides)
    return config_class(**kwargs)


def tiny_model(seed: int = 0, **overrides) -> LangSpecForConditionalGeneration:
    torch.manual_seed(seed)
    return LangSpecForConditionalGeneration(tiny_config(**overrides)).eval()


def enable_checkpointing(model, **kwargs) -> None:
    """Activation checkpointing under its transformers >= 5.2x name, or the older `gradient_checkpointing_enable`."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs or None)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs or None)


def random_batch(batch: int = 3, src_len: int = 9, tgt_len: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded source and decoder inputs with different lengths per example, and language ids."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(8, VOCAB, (batch, src_len), generator=g)
    decoder_input_ids = torch.randint(8, VOCAB, (batch, tgt_len), generator=g)
    decoder_input_ids[:, 0] = 2
    for b in range(1, batch):
        input_ids[b, src_len - (b * 2) % (src_len - 2) - 1 :] = PAD
        decoder_input_ids[b, tgt_len - b % (tgt_len - 2) :] = PAD
    return {
        "input_ids": input_ids,
        "attention_mask": input_ids.ne(PAD).long(),
        "decoder_input_ids": decoder_input_ids,
        "decoder_attention_mask": decoder_input_ids.ne(PAD).long(),
        "src_lang_ids": torch.randint(0, len(LANGUAGES), (batch,), generator=g),
        "tgt_lang_ids": torch.randint(0, len(LANGUAGES), (batch,), generator=g),
    }


def two_process_launcher() -> list[str]:
    """`accelerate launch` with two CPU processes, on a port nobody listens on now (the default 29500 can
    still be held by an earlier run's socket)."""
    import socket
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port)]  # fmt: skip


def with_diverse_outputs(model):
    """Large random weights: the freshly initialised tiny model repeats one piece for every input."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.3)
    return model


def generation_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What `generate()` (and an encoder-only forward) takes of a `random_batch`: no decoder inputs."""
    return {k: batch[k] for k in ("input_ids", "attention_mask", "src_lang_ids", "tgt_lang_ids")}


@pytest.fixture
def batch() -> dict[str, torch.Tensor]:
    return random_batch()


BLOCK_PACKAGE = """
import importlib.abc, sys

class BlockPackage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hf_langspec":
            raise ModuleNotFoundError("hf_langspec is not installed in this process")

sys.meta_path.insert(0, BlockPackage())
try:
    import hf_langspec  # noqa: F401
    raise SystemExit("hf_langspec was importable")
except ModuleNotFoundError:
    pass
"""


def run_without_package(script: str, *args, cwd) -> str:
    """Run `script` in a fresh interpreter where hf_langspec cannot be imported, with an empty HF_HOME.

    Returns its standard output; the script sees its arguments in sys.argv[1:].
    """
    import os
    import subprocess
    import sys

    env = dict(os.environ, HF_HOME=str(cwd / "hf_home"), HF_HUB_OFFLINE="1", PYTHONPATH="")
    command = [sys.executable, "-c", BLOCK_PACKAGE + script, *map(str, args)]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=300).stdout


REMOTE_FORWARD = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM

model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
batch = {k: torch.tensor(v) for k, v in json.loads(sys.argv[2]).items()}
print(json.dumps({"class": type(model).__module__ + "." + type(model).__name__, "logits": model(**batch).logits.tolist()}))
"""


def assert_round_trips(model, batch: dict, tmp_path) -> None:
    """Save `model`; it must reload through AutoModelForSeq2SeqLM with the same class and logits, here
    and as remote code in a fresh process where hf_langspec cannot be imported."""
    import json

    from transformers import AutoModelForSeq2SeqLM

    model.save_pretrained(tmp_path / "ckpt")
    expected = model(**batch).logits
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "ckpt").eval()
    assert type(loaded) is type(model)
    torch.testing.assert_close(loaded(**batch).logits, expected, atol=0, rtol=0)
    module = type(model).__module__.rsplit(".", 1)[-1]
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert saved["auto_map"]["AutoModelForSeq2SeqLM"] == f"{module}.{type(model).__name__}"
    out = run_without_package(
        REMOTE_FORWARD, tmp_path / "ckpt", json.dumps({k: v.tolist() for k, v in batch.items()}), cwd=tmp_path
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["class"].startswith("transformers_modules.")
    assert result["class"].endswith(f"{module}.{type(model).__name__}")
    torch.testing.assert_close(torch.tensor(result["logits"]), expected, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- docs/RELIABILITY.md
# `python scripts/reliability_table.py` runs the tests marked `reliability` with RELIABILITY_TABLE set to a
# file: each case's test, input (its parameters), what it checks (the docstring's first line) and outcome.
_RELIABILITY_ROWS: list[dict] = []


def pytest_runtest_makereport(item, call):
    import os

    if (
        call.when != "call"
        or not os.environ.get("RELIABILITY_TABLE")
        or item.get_closest_marker("reliability") is None
    ):
        return
    params = getattr(getattr(item, "callspec", None), "params", {})
    doc = (item.function.__doc__ or "").strip().split("\n")[0]
    _RELIABILITY_ROWS.append({
        "file": item.path.name, "test": item.originalname, "params": {k: repr(v) for k, v in params.items() if not callable(v)},  # a lambda reprs as its address
        "doc": doc, "passed": call.excinfo is None,
    })  # fmt: skip


def pytest_sessionfinish(session, exitstatus):
    import json
    import os

    target = os.environ.get("RELIABILITY_TABLE")
    if target and _RELIABILITY_ROWS:
        with open(target, "w") as handle:
            json.dump(_RELIABILITY_ROWS, handle, indent=1)


def tiny_suite(tmp_path: Path, name: str = "tiny.yaml", **changes) -> Path:
    """examples/suites/tiny.yaml with absolute data paths and its output under tmp_path."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    suite = yaml.safe_load((root / "examples/suites/tiny.yaml").read_text())
    data = suite["base"]["data"]
    data["train_files"] = [str(root / p) for p in data["train_files"]]
    data["valid_files"] = [str(root / p) for p in data["valid_files"]]
    data["test_files"] = {k: str(root / p) for k, p in data["test_files"].items()}
    suite["output_dir"] = str(tmp_path / "out")
    for key, value in changes.items():
        suite[key] = value
    path = tmp_path / name
    path.write_text(yaml.safe_dump(suite))
    return path


def cli_exit_code(args: list[str]) -> int:
    """`hf-langspec ARGS` in this process: its exit code, whether argparse exits or `main` returns."""
    from hf_langspec_cli import main

    try:
        return main(args)
    except SystemExit as exited:
        return exited.code


def documented_python(heading: str) -> tuple[str, str]:
    """The first Python block of the section titled `heading` in README.md or a page of docs/, and where it is."""
    import re

    root = Path(__file__).parents[1]
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        found = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
        if found:
            section = re.split(rf"^#{{1,{len(found.group(1))}}} ", text[found.end() :], maxsplit=1, flags=re.M)[0]
            code = re.search(r"```python\n(.*?)```", section, re.S)
            assert code, f"{page.name} ({heading}) has no Python block"
            return code.group(1), f"{page.relative_to(root)} ({heading})"
    raise AssertionError(f"no section {heading!r} in README.md or docs/")


def run_readme_example(heading: str, replace: dict[str, str] | None = None) -> dict:
    """Execute, as written (with `replace`'s substitutions, e.g. a local checkpoint for the documented path), the
    first Python block of the section `heading` of the README or the guide; returns its variables."""
    code, where = documented_python(heading)
    for old, new in (replace or {}).items():
        assert old in code, f"{where} no longer holds {old!r}"
        code = code.replace(old, new)
    scope: dict = {}
    exec(compile(code, where, "exec"), scope)  # the documentation's own example
    return scope


def assert_direction_folds(model, src: str, tgt: str) -> None:
    """`specialize(model, src, tgt)`'s plain model gives the generic model's logits on a batch of that direction."""
    from hf_langspec.export import specialize

    batch = random_batch(batch=3, seed=2)
    batch["src_lang_ids"] = torch.full((3,), LANGUAGES.index(src))
    batch["tgt_lang_ids"] = torch.full((3,), LANGUAGES.index(tgt))
    plain = specialize(model, src, tgt).model
    plain_inputs = {k: v for k, v in batch.items() if not k.endswith("lang_ids")}
    with torch.no_grad():
        torch.testing.assert_close(plain(**plain_inputs).logits, model(**batch).logits, atol=1e-4, rtol=1e-4)
