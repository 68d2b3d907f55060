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
