"""Typology probing (Jin & Xiong 2022, section 5.4): k-NN over learned language representations vs URIEL."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import LANGUAGES, random_batch, tiny_config
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hf_langspec import LAAConfig, LAAForConditionalGeneration, train_tokenizer
from hf_langspec.evaluation.typology import (
    FEATURE_GROUPS,
    K_VALUES,
    format_typology_table,
    knn_accuracy,
    language_representations,
    plot_typology,
    similarity_matrix,
    typology_table,
)


def brute_force_knn(vectors: list[list[float]], features: list[list[float | None]], k: int) -> float:
    """The same protocol written out with plain Python lists: cosine, sort, vote, tie -> nearest."""

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    scores = []
    for i, vector in enumerate(vectors):
        others = sorted((j for j in range(len(vectors)) if j != i), key=lambda j: -cos(vector, vectors[j]))
        right = seen = 0
        for f, gold in enumerate(features[i]):
            if gold is None:
                continue
            votes = [features[j][f] for j in others if features[j][f] is not None][:k]
            if not votes:
                continue
            ones = votes.count(1.0)
            guess = votes[0] if ones * 2 == len(votes) else float(ones * 2 > len(votes))
            right += guess == gold
            seen += 1
        if seen:
            scores.append(right / seen)
    return sum(scores) / len(scores)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n=st.integers(3, 8),
    dims=st.integers(2, 5),
    n_features=st.integers(1, 6),
    k=st.sampled_from(K_VALUES),
)
def test_knn_matches_a_brute_force_implementation(data, n, dims, n_features, k):
    vectors = [[data.draw(st.integers(-9, 9)) + 0.01 * (i + 1) * (d + 1) for d in range(dims)] for i in range(n)]
    # no ties in any row's cosine ranking (all-zero draws leave parallel vectors, whose order is rounding's and
    # differs between torch versions): the neighbours are then defined, and both implementations must agree
    cosines = similarity_matrix([torch.tensor(v, dtype=torch.float64) for v in vectors]).tolist()
    for i, row in enumerate(cosines):
        others = sorted(c for j, c in enumerate(row) if j != i)
        assume(all(b - a > 1e-6 for a, b in itertools.pairwise(others)))
    features = [[data.draw(st.sampled_from([0.0, 1.0, None])) for _ in range(n_features)] for _ in range(n)]
    if not any(v is not None for row in features for v in row):
        features[0][0] = 1.0
    similarity = similarity_matrix([torch.tensor(v) for v in vectors])
    try:
        expected = brute_force_knn(vectors, features, k)
    except ZeroDivisionError:
        with pytest.raises(ValueError, match="nothing to score"):
            knn_accuracy(similarity, features, k)
        return
    assert knn_accuracy(similarity, features, k)[0] == pytest.approx(expected, abs=1e-12)


def test_matrix_similarity_is_the_mean_row_cosine():
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    expected = sum(torch.nn.functional.cosine_similarity(a[r], b[r], dim=0) for r in range(4)) / 4
    assert similarity_matrix([a, b])[0, 1].item() == pytest.approx(expected.item(), abs=1e-6)
    assert similarity_matrix([a, b])[0, 0].item() == pytest.approx(1.0)


def test_representations_of_each_method():
    torch.manual_seed(0)
    model = LAAForConditionalGeneration(
        tiny_config(LAAConfig, laa_per_layer=True, lee_points=[5], lee_embedding="table")
    )
    laa = language_representations(model)  # auto: LAA
    assert list(laa) == LANGUAGES and laa["de"].shape == (32, 32)
    torch.testing.assert_close(laa["de"], model.laa_modules()["decoder"].weight[:, 1].mean(0))  # averaged layers
    assert language_representations(model, "lee")["fr"].shape == (32,)
    tags = language_representations(model, "tag")
    torch.testing.assert_close(tags["es"], model.model.shared.weight[model.config.lang_tag_token_ids[3]])


@pytest.mark.slow
def test_probing_a_tiny_trained_model_gives_table_6_for_all_feature_groups(tmp_path):
    texts = {code: [f"{code} a b c d e", f"{code} f g h i"] for code in LANGUAGES}
    tok = train_tokenizer(texts, languages=LANGUAGES, vocab_size=60, show_progress=False)
    torch.manual_seed(0)
    model = LAAForConditionalGeneration(tiny_config(LAAConfig, **tok.model_config_kwargs() | {"vocab_size": len(tok)}))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(5):
        batch = random_batch(seed=step)
        batch = {k: (v % len(tok) if k.endswith("input_ids") else v) for k, v in batch.items()}
        model(**batch, labels=batch["decoder_input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    table = typology_table(language_representations(model))
    assert set(table) == set(FEATURE_GROUPS) and all(set(row) == set(K_VALUES) for row in table.values())
    assert all(0.0 <= v <= 1.0 for row in table.values() for v in row.values())
    markdown = format_typology_table(table, "LAA dec.self")
    assert markdown.splitlines()[0] == "| feature | model | k=1 | k=3 | k=5 | k=7 | k=9 | max |"
    figure = plot_typology({"LAA": table}, tmp_path / "figure3.png")
    assert len(figure.axes) == 3 and (tmp_path / "figure3.png").stat().st_size > 0

    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    # the installed command, as a user runs it: bin/ first on sys.path, where lang2vec's script copy shadowed it
    script = Path(sys.executable).parent / "hf-langspec"
    out = subprocess.run([str(script), "typology", "--model", str(tmp_path / "model"), "--output",
                          str(tmp_path / "t.json")], capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("| feature | model |")
    saved = json.loads((tmp_path / "t.json").read_text())["model"]
    assert saved["syntax"]["1"] == pytest.approx(table["syntax"][1])
