"""The numbers the pages quote from a report equal the report (tests/quoted_numbers.py says how a page cites)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from quoted_numbers import citation_problems, cited_value

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [*ROOT.glob("docs/**/*.md"), *ROOT.glob("model_cards/*.md"), ROOT / "BENCHMARKS.md", ROOT / "README.md"]
)
CLM_REPORT = ROOT / "benchmarks/results/bible6_clm_norm/report.json"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_number_is_its_reports(page):
    assert citation_problems(page, ROOT) == []


def test_the_clm_page_cites_its_verdicts():
    """The CLM page's table and verdicts are cited, so the test above covers them (it passes on a page without any)."""
    text = (ROOT / "docs/methods/clm.md").read_text(encoding="utf-8")
    assert text.count("<!-- cite: ") >= 40


def test_a_number_that_differs_from_the_report_is_named(tmp_path):
    report = json.loads(CLM_REPORT.read_text(encoding="utf-8"))
    delta = cited_value(report, "claim sclm_post_zero_maps xx-en bleu delta")
    page = tmp_path / "page.md"
    cite = "<!-- cite: claim sclm_post_zero_maps xx-en bleu delta -->"
    head = f"<!-- report: {CLM_REPORT.relative_to(ROOT)} -->\n"
    page.write_text(f"{head}gains {delta:+.2f}{cite} BLEU\n", encoding="utf-8")
    assert citation_problems(page, ROOT) == []
    for wrong in (f"{delta + 0.01:+.2f}", f"{-delta:+.2f}", f"{delta:+.1f}0"):
        page.write_text(f"{head}gains {wrong}{cite} BLEU\n", encoding="utf-8")
        [problem] = citation_problems(page, ROOT)
        assert f"quotes {wrong}" in problem and "page.md:2" in problem


def test_percent_and_negated_fields(tmp_path):
    report = json.loads(CLM_REPORT.read_text(encoding="utf-8"))
    cell = report["systems"]["baseline_post"]["groups"]["zero-shot"]["off_target"]
    assert cited_value(report, "baseline_post zero-shot off_target mean") == pytest.approx(100 * cell["mean"])
    assert cited_value(report, "baseline_post zero-shot off_target -delta") == pytest.approx(-100 * cell["delta"])
    assert cited_value(report, "baseline_post zero-shot off_target seed2") == pytest.approx(100 * cell["values"][1])
    page = tmp_path / "page.md"
    page.write_text("46%<!-- cite: baseline_post zero-shot off_target mean -->\n", encoding="utf-8")
    assert "no `<!-- report: PATH -->`" in citation_problems(page, ROOT)[0]
    page.write_text(f"<!-- report: {CLM_REPORT.relative_to(ROOT)} -->\n1.0<!-- cite: nobody xx-en bleu mean -->\n")
    assert "names nothing" in citation_problems(page, ROOT)[0]


def test_a_report_named_mid_line_applies_to_the_numbers_after_it_and_dseed_is_against_the_baseline(tmp_path):
    bible6 = ROOT / "benchmarks/results/bible6/report.json"
    six, clm = (json.loads(path.read_text(encoding="utf-8")) for path in (bible6, CLM_REPORT))
    cell, base = (six["systems"][name]["groups"]["xx-en"]["bleu"] for name in ("xlp", "baseline"))
    expected = (
        cell["values"][six["systems"]["xlp"]["seeds"].index(2)]
        - base["values"][six["systems"]["baseline"]["seeds"].index(2)]
    )
    assert cited_value(six, "xlp xx-en bleu dseed2") == pytest.approx(expected)
    clm_mean = cited_value(clm, "baseline_post xx-en bleu mean")
    six_mean = cited_value(six, "baseline xx-en bleu mean")
    assert round(clm_mean, 2) != round(six_mean, 2)  # the two reports disagree, so the switch is seen
    page = tmp_path / "page.md"
    line = (
        f"<!-- report: {CLM_REPORT.relative_to(ROOT)} -->{clm_mean:.2f}<!-- cite: baseline_post xx-en bleu mean "
        f"--> and <!-- report: {bible6.relative_to(ROOT)} -->{six_mean:.2f}<!-- cite: baseline xx-en bleu mean -->"
    )
    page.write_text(line + "\n", encoding="utf-8")
    assert citation_problems(page, ROOT) == []


def test_a_dash_right_after_a_citation_joins_a_range_and_is_not_a_minus(tmp_path):
    bible6 = ROOT / "benchmarks/results/bible6/report.json"
    report = json.loads(bible6.read_text(encoding="utf-8"))
    low, high = (cited_value(report, f"laa zero-shot off_target seed{seed}") for seed in (1, 2))
    page = tmp_path / "page.md"
    for second, problems in ((high, 0), (high + 0.1, 1)):
        page.write_text(f"<!-- report: {bible6.relative_to(ROOT)} -->\n{low:.1f}<!-- cite: laa zero-shot off_target "
                        f"seed1 -->-{second:.1f}%<!-- cite: laa zero-shot off_target seed2 -->\n")  # fmt: skip
        assert len(citation_problems(page, ROOT)) == problems
