"""Comparing methods at an equal budget over seeds: suites, the runner and the report.

`hf-langspec compare --suite examples/suites/bible3.yaml --workers 2` or, in Python,
`hf_langspec.compare.compare("examples/suites/bible3.yaml", workers=2)`. See `suite` for the file layout,
`runner` for scheduling, `report` for the statistics.
"""

from .report import build_report
from .runner import compare
from .statistics import paired_bootstrap
from .suite import Suite, load_suite

__all__ = ["Suite", "build_report", "compare", "load_suite", "paired_bootstrap"]
