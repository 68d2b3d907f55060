"""Languages added to a served model from a folder (issue 58, item 1): one copy of a frozen pretrained base, each
language's modules beside it. A pack exported from another model adapted on the same base is appended; the grown
model translates as a model built independently with those modules at their known axes, its untouched directions
as before; packs that cannot fit are refused with the reason, and a running server serves the new language after
`POST /admin/reload-languages`."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
import torch
from conftest import nllb_checkpoint

from hf_langspec.evaluation.translate import translate
from hf_langspec.export.language_packs import (
    PACK_FILE,
    add_language_packs,
    export_language_pack,
    language_axes,
)
from hf_langspec.pretrained import load_pretrained

SENTENCES = ["the cat sat on the mat", "die Katze sass auf der Matte", "le chat etait sur le tapis"]
LORA = {"lora_rank": 4}
GEN = {
    "num_beams": 2,
    "max_new_tokens": 6,
    "show_progress": False,
}  # the models' generation config: what the server decodes with


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return nllb_checkpoint(tmp_path_factory.mktemp("nllb"))


def adapted(checkpoint, languages, seed, method="lora", **fields):
    """The checkpoint adapted for `languages`, its modules moved off their identity start (as training would)."""
    model, tokenizer = load_pretrained(checkpoint, method, languages=languages, **(fields or LORA))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".insertions." in name:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.generation_config.num_beams, model.generation_config.max_new_tokens = 2, 6
    return model.eval(), tokenizer


def reference(checkpoint, served, donor):
    """eng/deu/fra LoRA built on its own: eng and deu's slices from `served`, fra's from `donor` (index 1 there),
    at LoRA's documented axes: attention factors [layers, projections, L, ...], FFN factors [layers, L, ...]."""
    model, tokenizer = load_pretrained(checkpoint, "lora", languages=["eng_Latn", "deu_Latn", "fra_Latn"], **LORA)
    old, new = dict(served.named_parameters()), dict(donor.named_parameters())
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".insertions." in name:
                axis = 2 if parameter.dim() == 5 else 1
                parameter.copy_(torch.cat([old[name], new[name].narrow(axis, 1, 1)], dim=axis))
    model.generation_config = served.generation_config
    return model.eval(), tokenizer


def test_lora_language_axes_are_found_where_the_module_stacks_them(checkpoint):
    model, _ = adapted(checkpoint, ["eng_Latn", "deu_Latn"], seed=1)
    axes = language_axes(model)
    assert axes and all(axis == (2 if dict(model.named_parameters())[n].dim() == 5 else 1) for n, axis in axes.items())


def test_a_pack_from_a_model_on_the_same_base_translates_as_the_model_built_with_its_modules(checkpoint, tmp_path):
    served, tokenizer = adapted(checkpoint, ["eng_Latn", "deu_Latn"], seed=1)
    donor, donor_tokenizer = adapted(checkpoint, ["eng_Latn", "fra_Latn"], seed=2)
    export_language_pack(donor, donor_tokenizer, ["fra_Latn"], tmp_path / "fra")
    before = translate(served, tokenizer, SENTENCES[:2], "eng_Latn", "deu_Latn", **GEN)
    base = {n: p for n, p in served.named_parameters() if ".insertions." not in n}
    grown, added = add_language_packs(served, tokenizer, [tmp_path / "fra"])
    assert added == ["fra_Latn"] and grown.config.languages == ["eng_Latn", "deu_Latn", "fra_Latn"]
    # one copy of the base: the grown model holds the served model's base tensors themselves
    shared = {n: p for n, p in grown.named_parameters() if n in base}
    assert all(p.data_ptr() == base[n].data_ptr() for n, p in shared.items()) and len(shared) == len(base)
    expected, expected_tokenizer = reference(checkpoint, served, donor)
    assert tokenizer.vocabulary_fingerprint() == expected_tokenizer.vocabulary_fingerprint()
    for src, tgt in [("fra_Latn", "eng_Latn"), ("eng_Latn", "fra_Latn"), ("deu_Latn", "fra_Latn")]:
        got = translate(grown, tokenizer, SENTENCES, src, tgt, **GEN)
        assert got == translate(expected, expected_tokenizer, SENTENCES, src, tgt, **GEN), (src, tgt)
    assert translate(grown, tokenizer, SENTENCES[:2], "eng_Latn", "deu_Latn", **GEN) == before
    # and the logits, not only the outputs
    inputs = tokenizer(SENTENCES, text_target=SENTENCES, src_lang="fra_Latn", tgt_lang="eng_Latn", padding=True,
                       return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        torch.testing.assert_close(grown(**inputs).logits, expected(**inputs).logits)


@pytest.mark.reliability
def test_packs_that_cannot_fit_are_refused_with_the_reason(checkpoint, tmp_path):
    """A language pack of other settings, another base, a served language or a damaged folder: refused, naming it."""
    served, tokenizer = adapted(checkpoint, ["eng_Latn", "deu_Latn"], seed=1)
    donor, donor_tokenizer = adapted(checkpoint, ["eng_Latn", "fra_Latn"], seed=2)
    export_language_pack(donor, donor_tokenizer, ["fra_Latn"], tmp_path / "fra")
    other_rank, other_tokenizer = adapted(checkpoint, ["eng_Latn", "fra_Latn"], seed=2, lora_rank=2)
    export_language_pack(other_rank, other_tokenizer, ["fra_Latn"], tmp_path / "rank2")
    retrained, retrained_tokenizer = adapted(checkpoint, ["eng_Latn", "fra_Latn"], seed=2)
    with torch.no_grad():
        retrained.get_input_embeddings().weight[5] += 1  # the base trained too: not the served model's base
    export_language_pack(retrained, retrained_tokenizer, ["fra_Latn"], tmp_path / "other-base")
    export_language_pack(donor, donor_tokenizer, ["eng_Latn"], tmp_path / "eng")
    cases = {
        "rank2": r"other settings \(lora_rank: pack 2, model 4\)",
        "other-base": "trained on another base than this model's",
        "eng": r"adds \['eng_Latn'\], which the model already serves",
    }
    for folder, message in cases.items():
        with pytest.raises(ValueError, match=message):
            add_language_packs(served, tokenizer, [tmp_path / folder])
    assert tokenizer.languages == ["eng_Latn", "deu_Latn"]  # nothing changed by a refused pack
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / PACK_FILE).write_text(json.dumps({"format": 1}))
    with pytest.raises(ValueError, match=r"cut is not a language pack .*export it again"):
        add_language_packs(served, tokenizer, [tmp_path / "cut"])
    with pytest.raises(ValueError, match="is not empty; give a new folder"):
        export_language_pack(donor, donor_tokenizer, ["fra_Latn"], tmp_path / "fra")


@pytest.mark.reliability
def test_pair_adapters_cannot_take_a_language_pack_and_say_why(checkpoint):
    """Modules indexed by language pair do not grow with a language: refused with that reason."""
    pairs = [["eng_Latn", "deu_Latn"], ["deu_Latn", "eng_Latn"]]
    model, _ = load_pretrained(checkpoint, "adapter", languages=["eng_Latn", "deu_Latn"], adapter_preset="bapna_firat",
                               adapter_dim=8, language_pairs=pairs)  # fmt: skip
    with pytest.raises(ValueError, match=r"does not have one axis per language .* cannot take a language pack"):
        language_axes(model)


def test_a_running_server_serves_a_language_put_in_its_folder_after_a_reload(checkpoint, tmp_path):
    from hf_langspec.export.access import AccessPolicy
    from hf_langspec.export.backends import ModelBackend
    from hf_langspec.export.server import TranslationServer

    served, tokenizer = adapted(checkpoint, ["eng_Latn", "deu_Latn"], seed=1)
    donor, donor_tokenizer = adapted(checkpoint, ["eng_Latn", "fra_Latn"], seed=2)
    expected, expected_tokenizer = reference(checkpoint, served, donor)
    packs = tmp_path / "packs"
    packs.mkdir()
    token = "t" * 24
    server = TranslationServer(ModelBackend(served, tokenizer), port=0, language_dir=packs,
                               access=AccessPolicy(admin_token=token))  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def call(path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}  # the admin route's
        request = urllib.request.Request(server.url + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    try:
        request = [{"text": SENTENCES[2], "src_lang": "fra_Latn", "tgt_lang": "eng_Latn"},
                   {"text": SENTENCES[0], "src_lang": "eng_Latn", "tgt_lang": "deu_Latn"}]  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as unknown:
            call("/translate", request)
        assert unknown.value.code == 400
        memory_before = call("/health")["memory"]
        export_language_pack(donor, donor_tokenizer, ["fra_Latn"], packs / "fra")
        answer = call("/admin/reload-languages", {})
        assert answer["added_languages"] == ["fra_Latn"] and "fra_Latn-eng_Latn" in answer["added_directions"]
        got = [item["translation"] for item in call("/translate", request)]
        assert got == [
            translate(expected, expected_tokenizer, [SENTENCES[2]], "fra_Latn", "eng_Latn", **GEN)[0],
            translate(expected, expected_tokenizer, [SENTENCES[0]], "eng_Latn", "deu_Latn", **GEN)[0],
        ]
        memory = call("/health")["memory"]  # one base; the modules grew by one language's
        assert memory["base_bytes"] == memory_before["base_bytes"]
        assert memory["language_modules_bytes"] * 2 == memory_before["language_modules_bytes"] * 3
        assert call("/admin/reload-languages", {})["added_languages"] == []  # loaded once
    finally:
        server.close()
        thread.join(timeout=30)


def test_the_cli_exports_a_pack_that_a_model_folder_then_takes(checkpoint, tmp_path, capsys):
    from conftest import cli_exit_code

    donor, donor_tokenizer = adapted(checkpoint, ["eng_Latn", "fra_Latn"], seed=2)
    donor.save_pretrained(tmp_path / "donor")
    donor_tokenizer.save_pretrained(tmp_path / "donor")
    command = ["export", "--model", str(tmp_path / "donor"), "--language-pack", "fra_Latn"]
    assert cli_exit_code([*command, "--output-dir", str(tmp_path / "packs" / "fra")]) == 0
    assert "language pack of fra_Latn" in capsys.readouterr().out
    served, tokenizer = adapted(checkpoint, ["eng_Latn", "deu_Latn"], seed=1)
    grown, added = add_language_packs(served, tokenizer, [tmp_path / "packs" / "fra"])
    expected, _ = reference(checkpoint, served, donor)
    assert added == ["fra_Latn"]
    for (name, p), (_, q) in zip(grown.named_parameters(), expected.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    assert cli_exit_code([*command, "--output-dir", str(tmp_path / "packs" / "fra")]) == 2  # never over a pack
    assert "is not empty; give a new folder" in capsys.readouterr().err
    assert cli_exit_code(["serve", "--export", str(tmp_path), "--language-dir", str(tmp_path / "packs")]) == 2
    assert "give it with --model" in capsys.readouterr().err
