"""The documentation: the site builds in MkDocs' strict mode (every page in the nav, every link and anchor
resolving, the API reference rendered from the docstrings), and the README's examples run as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TEXTS, nllb_checkpoint, run_readme_example

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path):
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)]
    quiet = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about its successor
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=quiet)
    assert result.returncode == 0, result.stderr[-3000:]
    home = (tmp_path / "index.html").read_text()
    assert "The main job: one command" in home and 'href="methods/lsl/"' in home  # the README, relinked
    assert "BENCHMARKS.md" in home and 'href="BENCHMARKS.md"' not in home  # a repository file: named, not linked
    reference = (tmp_path / "reference" / "export" / "index.html").read_text()
    assert "TranslationServer" in reference and "LibreTranslateRequest" in reference  # rendered from docstrings
    for page in (ROOT / "docs").rglob("*.md"):  # every page is built (strict mode refuses one left out of the nav)
        built = tmp_path / page.relative_to(ROOT / "docs").with_suffix("")
        assert (built / "index.html").is_file() or page.name == "index.md", page


def test_the_api_reference_covers_every_public_class_and_method_page():
    """Every class `hf_langspec` exports is rendered in the API reference, and each method page links its section."""
    import hf_langspec

    reference = "\n".join(page.read_text() for page in (ROOT / "docs" / "reference").glob("*.md"))
    rendered = {line.split()[1].rsplit(".", 1)[-1] for line in reference.splitlines() if line.startswith("::: ")}
    classes = {name for name in hf_langspec.__all__ if isinstance(getattr(hf_langspec, name), type)}
    # the base of every model and the registry's record: documented in their modules
    inner = {"LangSpecPreTrainedModel", "Variant"}
    missing = classes - rendered - inner
    assert not missing, f"not in docs/reference: {sorted(missing)}"
    anchors = {line.rsplit("{#", 1)[1].rstrip("}") for line in (ROOT / "docs/reference/models.md").read_text().splitlines()
               if line.startswith("## ") and "{#" in line}  # fmt: skip
    for page in (ROOT / "docs" / "methods").glob("*.md"):
        assert f"../reference/models.md#{page.stem}" in page.read_text() and page.stem in anchors, page.name


def test_the_readme_method_example_translates_mixed_directions():
    scope = run_readme_example("Train a method")
    output, config = scope["output"], scope["config"]
    assert output.shape[0] == 2 and output.shape[1] <= 1 + 8
    assert config.lsl_encoder_source_layers == [0] and config.lsl_encoder_target_layers == [1]


def test_the_readme_pretrained_example_generates_what_the_checkpoint_generates(tmp_path):
    """`load_pretrained` on a local NLLB-convention checkpoint, the README's block as written (the path replaced):
    the adapted model's beam search equals the checkpoint's with the target's code forced, as NLLB is used."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = nllb_checkpoint(tmp_path / "nllb")
    scope = run_readme_example("Adapt a pretrained model", {"path/to/nllb-200-distilled-600M": str(folder),
                                                             '"The cat sat."': repr(TEXTS[0])})  # fmt: skip
    original, checkpoint = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    original.src_lang = "eng_Latn"
    inputs = original(TEXTS[0], return_tensors="pt")
    with torch.no_grad():
        reference = checkpoint.generate(**inputs, forced_bos_token_id=original.convert_tokens_to_ids("deu_Latn"),
                                        num_beams=4, max_new_tokens=21)  # fmt: skip
    assert scope["generated"].tolist() == reference.tolist()
    assert scope["model"].config.languages == ["eng_Latn", "deu_Latn", "fra_Latn"]
