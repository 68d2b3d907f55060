"""Loaders (local files, the Hub layouts on local fixtures), filters, directions, the temperature sampler."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_langspec.data import (
    TemperatureSampler,
    both_directions,
    canonical_dataset,
    filter_pairs,
    hold_out_directions,
    load_corpus,
    load_local,
    multiway_pairs,
)
from hf_langspec.data.schema import CANONICAL_COLUMNS

ROWS = [
    {"src_lang": "de", "tgt_lang": "en", "src": "Im Anfang schuf Gott.", "tgt": "In the beginning God created."},
    {"src_lang": "de", "tgt_lang": "en", "src": "Jesus vergoß Tränen.", "tgt": "Jesus wept."},
]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_local_formats_give_identical_canonical_rows(tmp_path):
    jsonl = _write(tmp_path / "a.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    tsv4 = _write(tmp_path / "b.tsv", "".join("\t".join(r[c] for c in CANONICAL_COLUMNS) + "\n" for r in ROWS))
    tsv2 = _write(tmp_path / "c.tsv", "".join(f"{r['src']}\t{r['tgt']}\n" for r in ROWS))
    src = _write(tmp_path / "corpus.de", "".join(r["src"] + "\n" for r in ROWS))
    tgt = _write(tmp_path / "corpus.en", "".join(r["tgt"] + "\n" for r in ROWS))
    loaded = [
        load_local(jsonl),
        load_local(tsv4),
        load_local(tsv2, src_lang="de", tgt_lang="en"),
        load_local(src, tgt_path=tgt, src_lang="de", tgt_lang="en"),
    ]
    for dataset in loaded:
        assert dataset.to_list() == ROWS and dataset.column_names == list(CANONICAL_COLUMNS)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", json.dumps(ROWS[0]) + "\n{not json\n", r"bad.jsonl:2: not valid JSON"),
        (
            "missing.jsonl",
            json.dumps({"src": "a", "tgt": "b"}) + "\n",
            r"missing.jsonl:1: missing fields \['src_lang', 'tgt_lang'\]",
        ),
        ("empty.jsonl", json.dumps(ROWS[0]) + "\n\n", r"empty.jsonl:2: empty line"),
        (
            "blank.jsonl",
            json.dumps({**ROWS[0], "tgt": " "}) + "\n",
            r"blank.jsonl:1: fields \['tgt'\] must be non-empty",
        ),
        ("short.tsv", "de\ten\tonly three\n", r"short.tsv:1: 3 tab-separated fields, expected 4"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, name, content, message):
    with pytest.raises(ValueError, match=message):
        load_local(_write(tmp_path / name, content))


def test_moses_files_must_align(tmp_path):
    src = _write(tmp_path / "x.de", "a\nb\n")
    tgt = _write(tmp_path / "x.en", "a\n")
    with pytest.raises(ValueError, match=r"has 2 lines but .*x.en has 1"):
        load_local(src, tgt_path=tgt, src_lang="de", tgt_lang="en")


def test_hub_layouts_read_local_fixtures_into_identical_rows(tmp_path):
    """OPUS-100/WMT/IWSLT/Europarl rows and TED multi-way rows, as the Hub serves them, in local files."""
    translation = _write(
        tmp_path / "opus_de_en.jsonl",
        "".join(
            json.dumps({"translation": {"de": r["src"], "en": r["tgt"]}}, ensure_ascii=False) + "\n" for r in ROWS
        ),
    )
    ted = _write(
        tmp_path / "ted.jsonl",
        "".join(
            json.dumps(
                {
                    "talk_name": f"t{i}",
                    "translations": {"language": ["en", "fr", "de"], "translation": [r["tgt"], "x", r["src"]]},
                },
                ensure_ascii=False,
            )
            + "\n"
            for i, r in enumerate(ROWS)
        )
        + json.dumps({"talk_name": "only-fr", "translations": {"language": ["fr"], "translation": ["y"]}})
        + "\n",
    )
    for corpus in ("opus100", "wmt14", "iwslt17", "europarl", "wmt10"):
        assert load_corpus(corpus, ["de-en"], data_files=str(translation)).to_list() == ROWS
    assert load_corpus("ted59", ["de-en"], split="test", data_files=[str(ted)]).to_list() == ROWS
    both = load_corpus(
        "opus100", ["de-en", "en-de"], data_files={"de-en": str(translation), "en-de": str(translation)}
    )
    assert Counter(f"{r['src_lang']}-{r['tgt_lang']}" for r in both) == {"de-en": 2, "en-de": 2}


def test_wrong_hub_layout_names_the_expected_fields(tmp_path):
    wrong = _write(tmp_path / "wrong.jsonl", json.dumps({"de": "a", "en": "b"}) + "\n")
    with pytest.raises(
        ValueError,
        match=r"expected rows like \{'translation': \{'de': \.\.\., 'en': \.\.\.\}\}, found columns \['de', 'en'\]",
    ):
        load_corpus("opus100", ["de-en"], data_files=str(wrong))
    with pytest.raises(ValueError, match=r"expected rows like \{'translations'"):
        load_corpus("ted59", ["de-en"], data_files=str(wrong))
    with pytest.raises(ValueError, match=r"ted59 has no language 'af', 'xx'; its languages: ar, az,"):
        load_corpus("ted59", ["en-xx", "af-en"], data_files=str(wrong))  # before anything is read
    other_pair = _write(tmp_path / "fr.jsonl", json.dumps({"translation": {"fr": "a", "en": "b"}}) + "\n")
    with pytest.raises(ValueError, match=r"row 0: 'translation' has \['en', 'fr'\], expected the keys 'de' and 'en'"):
        load_corpus("wmt14", ["de-en"], data_files=str(other_pair))


@pytest.mark.reliability
def test_an_unreachable_hub_is_one_line_naming_the_ways_around_it(monkeypatch, tmp_path, capsys):
    """`data hub` without network was a ConnectionError traceback reported as a bug (the Hub is unreachable here)."""
    from conftest import cli_exit_code

    from hf_langspec.data import hub

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Helsinki-NLP/opus-100' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(hub, "load_dataset", offline)
    with pytest.raises(
        ConnectionError, match=r"Cannot reach Helsinki-NLP/opus-100 on the Hugging Face Hub .*--data-files"
    ):
        hub.load_corpus("opus100", ["en-de"], split="train")
    assert (
        cli_exit_code(["data", "hub", "opus100", "--directions", "en-de", "--output", str(tmp_path / "o.jsonl")]) == 2
    )
    err = capsys.readouterr().err
    assert (
        "Cannot reach Helsinki-NLP/opus-100" in err and "Traceback" not in err and not (tmp_path / "o.jsonl").exists()
    )


def test_hub_corpus_names_configs_like_the_hub():
    from hf_langspec.data.hub import CORPORA

    assert CORPORA["opus100"].source("en", "de") == ("Helsinki-NLP/opus-100", "de-en")
    assert CORPORA["wmt14"].source("en", "hi") == ("wmt/wmt14", "hi-en")
    assert CORPORA["wmt10"].source("gu", "en") == ("wmt/wmt19", "gu-en")
    assert CORPORA["iwslt17"].source("it", "ro") == ("IWSLT/iwslt2017", "iwslt2017-it-ro")
    with pytest.raises(ValueError, match="WMT-10 has"):
        CORPORA["wmt10"].source("de", "fr")
    with pytest.raises(ValueError, match="europarl has splits \\['train'\\], not 'test'"):
        load_corpus("europarl", ["de-en"], split="test")
    with pytest.raises(ValueError, match="Unknown corpus 'opus'"):
        load_corpus("opus", ["de-en"])


def test_filters_count_what_they_remove():
    rows = [
        {"src_lang": "de", "tgt_lang": "en", "src": "a b", "tgt": "a b"},  # kept
        {"src_lang": "de", "tgt_lang": "en", "src": "a b", "tgt": "a b"},  # duplicate
        {"src_lang": "de", "tgt_lang": "en", "src": " ".join(["w"] * 11), "tgt": "x"},  # too long
        {"src_lang": "de", "tgt_lang": "en", "src": "a b c d", "tgt": "x"},  # ratio 4 > 3
        {"src_lang": "de", "tgt_lang": "en", "src": "held out", "tgt": "new"},  # source in test
        {"src_lang": "en", "tgt_lang": "de", "src": "fresh", "tgt": "held out"},  # target in test
        {"src_lang": "de", "tgt_lang": "en", "src": "held out", "tgt": "x y"},  # in test: counted once
    ]
    test = [{"src_lang": "de", "tgt_lang": "en", "src": "held out", "tgt": "z"}]
    kept, report = filter_pairs(rows, max_length=10, max_ratio=3.0, exclude=[test])
    assert kept.to_list() == rows[:1]
    assert report.removed == {
        "empty side": 0,
        "longer than 10": 1,
        "shorter than 1": 0,
        "length ratio above 3.0": 1,
        "in valid/test": 3,
        "duplicate": 1,
    }
    assert report.total == len(rows) and "| kept | 1 |" in report.table()


def test_directions_helpers():
    dataset = both_directions(ROWS)
    assert Counter(f"{r['src_lang']}-{r['tgt_lang']}" for r in dataset) == {"de-en": 2, "en-de": 2}
    pairs = multiway_pairs([{"texts": {"en": "a", "de": "b", "fr": "c"}}, {"texts": {"en": "d", "de": "e"}}])
    assert len(pairs) == 6 + 2
    chosen = multiway_pairs([{"texts": {"en": "a", "fr": "c"}}, {"texts": {"en": "d", "de": "e"}}], ["de-fr", "en-de"])
    assert chosen.to_list() == [{"src_lang": "en", "tgt_lang": "de", "src": "d", "tgt": "e"}]
    kept, held = hold_out_directions(pairs, ["de-fr", "fr-de"])
    assert len(held) == 2 and len(kept) == 6
    with pytest.raises(ValueError, match=r"Directions \['es-fr'\] do not occur"):
        hold_out_directions(pairs, ["es-fr"])


SIZES = {"en-de": 50_000, "en-fr": 5_000, "en-sw": 500, "en-xh": 50}


def _sampler(temperature=5.0, **kwargs):
    directions = [d for d, n in SIZES.items() for _ in range(n)]
    return TemperatureSampler(directions, temperature=temperature, num_samples=100_000, **kwargs), directions


@pytest.mark.parametrize("temperature", [1.0, 5.0, 100.0])
def test_sampler_frequencies_follow_the_temperature(temperature):
    sampler, directions = _sampler(temperature, seed=3)
    counts = Counter(directions[i] for i in sampler)
    total = sum(SIZES.values())
    weights = {d: (n / total) ** (1 / temperature) for d, n in SIZES.items()}
    norm = sum(weights.values())
    for d in SIZES:
        assert abs(counts[d] / 100_000 - weights[d] / norm) < 0.02, (d, counts[d])


def test_sampler_is_identical_on_every_rank_and_changes_per_epoch():
    rank0, _ = _sampler(seed=7)
    rank1, _ = _sampler(seed=7)
    assert list(rank0) == list(rank1)
    first = list(rank0)
    rank0.set_epoch(1)
    assert list(rank0) != first


def test_sampler_draws_every_example_of_a_direction_before_repeating():
    sampler, directions = _sampler(100.0, seed=1)
    xh = [i for i in sampler if directions[i] == "en-xh"]
    assert len(xh) > 50 * 100  # heavily oversampled
    assert all(len(set(xh[k : k + 50])) == 50 for k in range(0, 50 * 100, 50))  # cycles of full permutations


def test_sampler_temperature_warm_up():
    sampler, _ = _sampler(5.0, warmup_epochs=4)
    assert [sampler.current_temperature(e) for e in (0, 2, 4, 9)] == [1.0, 3.0, 5.0, 5.0]
    assert sampler.probabilities(0)["en-de"] == pytest.approx(50_000 / sum(SIZES.values()))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=40), st.integers(0, 99))
def test_sampler_only_yields_valid_indices(directions, seed):
    sampler = TemperatureSampler(directions, seed=seed)
    indices = list(sampler)
    assert len(indices) == len(directions) and all(0 <= i < len(directions) for i in indices)
    assert set(directions[i] for i in indices) <= set(directions)


def test_canonical_dataset_columns():
    assert canonical_dataset(ROWS).column_names == list(CANONICAL_COLUMNS)


def test_sampler_groups_by_length_without_changing_the_draws():
    directions = ["a"] * 300 + ["b"] * 30
    lengths = [(i * 37) % 50 + 1 for i in range(len(directions))]
    plain = TemperatureSampler(directions, seed=4)
    grouped = TemperatureSampler(directions, seed=4, lengths=lengths, batch_size=8, megabatch_size=5)
    drawn, ordered = list(plain), list(grouped)
    assert sorted(drawn) == sorted(ordered)  # same examples, same direction mix
    for start in range(0, len(ordered), 40):
        chunk = [lengths[i] for i in ordered[start : start + 40]]
        assert chunk == sorted(chunk, reverse=True)
    with pytest.raises(ValueError, match="needs batch_size"):
        TemperatureSampler(directions, lengths=lengths)


def test_per_direction_keeps_the_first_rows_of_each_direction():
    from hf_langspec.data.processing import per_direction

    rows = both_directions(ROWS).to_list()
    assert {d: len(r) for d, r in per_direction(rows, 1).items()} == {"de-en": 1, "en-de": 1}
    assert per_direction(rows)["en-de"] == [r for r in rows if r["src_lang"] == "en"]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("src_lang\ttgt_lang\tsrc\ttgt", r"is a header line"),
        ("EN\tde\tHello\tHallo", r"'EN' is not a language code; use ISO 639 in lowercase"),
        ("en \tde\tHello\tHallo", r"'en ' is not a language code"),
        ("en\ten\tHello\tHello", r"source and target are both 'en'"),
    ],
)
def test_local_lines_that_are_not_what_they_claim_are_refused_with_their_line(tmp_path, line, message):
    path = tmp_path / "data.tsv"
    path.write_text("en\tde\tGood morning\tGuten Morgen\n" + line + "\n")
    with pytest.raises(ValueError, match=rf"data.tsv:2.*{message}|data.tsv:2 {message}"):
        load_local(path)


@pytest.mark.reliability
def test_a_folder_or_an_unknown_extension_given_as_data_is_one_line(tmp_path, capsys):
    """`evaluate --test FOLDER` said "pass format='jsonl'" (an argument no command has); a folder read as a file is
    errno 21, which the CLI reported as a bug. Each is now one line naming the path and what to give instead."""
    from hf_langspec_cli import main

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "test.txt").write_text('{"src_lang": "en", "tgt_lang": "de", "src": "a", "tgt": "b"}\n')
    for data, message in [(folder, f"{folder} is a folder; give a data file (.jsonl, .json or .tsv"),
                          (folder / "test.txt", "from its extension: name it .jsonl, .json or .tsv, or pass")]:  # fmt: skip
        code = main(["data", "local", str(data), "--output", str(tmp_path / "out.jsonl")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out.jsonl").exists()
    # and a file where a corpus folder goes (it was "[Errno 17] File exists")
    assert main(["data", "bible", "--output-dir", str(folder / "test.txt"), "--languages", "en,de"]) == 2
    assert f"--output-dir {folder / 'test.txt'} is a file; give a folder." in capsys.readouterr().err


@pytest.mark.reliability
def test_a_stray_language_in_a_large_corpus_is_refused_with_its_position():
    from hf_langspec.data.checks import check_stray_languages

    rows = [{"src_lang": "en", "tgt_lang": "de", "src": f"s{i}", "tgt": f"t{i}"} for i in range(1500)]
    rows[700] = {**rows[700], "tgt_lang": "xx"}
    with pytest.raises(ValueError, match=r"'xx' \(1 example\(s\), the first is example 701\).*a typo"):
        check_stray_languages(rows, "train.jsonl")
    check_stray_languages(rows[:500], "a small corpus: no judgement")


@pytest.mark.reliability
def test_swapped_labels_are_reported_with_the_share():
    from hf_langspec.data.checks import language_label_disagreement, warn_about_labels

    english = ["The Lord is my shepherd; I shall not want.", "In the beginning was the Word.",
               "Blessed are the meek, for they shall inherit the earth.", "Love your neighbour as yourself.",
               "Ask, and it will be given to you; seek, and you will find."]  # fmt: skip
    german = ["Der Herr ist mein Hirte, mir wird nichts mangeln.", "Im Anfang war das Wort.",
              "Selig sind die Sanftmütigen, denn sie werden das Land ererben.", "Liebe deinen Nächsten wie dich selbst.",
              "Bittet, so wird euch gegeben; suchet, so werdet ihr finden."]  # fmt: skip
    right = [{"src_lang": "en", "tgt_lang": "de", "src": e, "tgt": g} for e, g in zip(english, german, strict=True)]
    assert warn_about_labels(right) == []
    swapped = [{**r, "src": r["tgt"], "tgt": r["src"]} for r in right]
    shares = language_label_disagreement(swapped)
    assert shares == {"de": (1.0, "en"), "en": (1.0, "de")}
    assert len(warn_about_labels(swapped)) == 2
