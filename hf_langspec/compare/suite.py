"""A comparison suite: one base experiment, named systems as overrides of it, and seeds.

```yaml
name: bible3
output_dir: runs/compare-bible3          # shared data and tokenizer, one run directory per (system, seed)
results_dir: benchmarks/results/bible3   # results files and the report (default: <output_dir>/results)
seeds: [1, 2, 3]                         # every system's, unless it names its own
baseline: baseline                       # the system every other one is compared with
base:                                    # an ordinary experiment config without output_dir
  data: {bible: {languages: [en, de, fr]}, max_length: 48}
  tokenizer: {vocab_size: 4000}
  model: {d_model: 128}
  training: {max_steps: 3000, per_device_train_batch_size: 32}
  evaluation: {max_sentences_per_direction: 50, num_beams: 4}
systems:
  baseline: {label: "Transformer, source tags"}
  fcll: {label: FCLL, paper: CLL, set: {model.class: cll, model.central_language: en},
         seeds: [1, 2, 3, 4, 5],             # more seeds where the seed-to-seed spread hides an effect
         controls: [parameters, compute]}    # the baseline widened to its size and to its compute (controls.py)
report:
  resource_groups: {low_below: 5000, high_from: 20000}   # Low/Med/High groups by training examples
  claims:                                                # one line per paper under the table
    - {paper: "CLL", system: fcll, group: zero-shot, metric: off_target, expect: down,
       note: "where this setting departs from the paper's"}      # printed after the verdict
    - {paper: "CLM", system: sclm_slow, against: baseline_slow, group: xx-en, metric: bleu, expect: up}
                                         # against: judged on another row (a control), not the baseline
    - {paper: "CLL", system: fcll, against: parameters, group: zero-shot, metric: bleu, expect: up}
                                         # against: parameters / compute: the system's matched control
  insert_into: [README.md]               # replace the text between <!-- compare:NAME --> markers
  answers_into: [docs/guide/comparing.md]  # the answer table (answers.py) between <!-- answers:NAME --> markers
  other_budgets: [examples/suites/bible11.yaml]   # the claims judged on these suites' reports too (budgets.py)
```

A system's `set` takes the keys of `hf-langspec train --set` (dotted paths into the config, values
as YAML would parse them). Systems may change anything but the data, the vocabulary and the
training budget (steps x batch): those are what makes the comparison fair, and a change to them is
refused before anything runs. The tag style is the one tokenizer setting a system may change.
A system with its own `seeds` is compared with the baseline on the seeds both have (seed i with seed i).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hf_langspec_cli.config_file import ConfigError, check_keys, read_config_file, set_keys

from ..training.config import validate_config
from ..training.model_check import check_model_settings
from .controls import CONTROL_KINDS, Control, control_label, plan_controls
from .groups import group_names
from .markers import insertion_problem

SUITE_KEYS = {"name", "description", "output_dir", "results_dir", "seeds", "baseline", "base", "systems", "report"}
SYSTEM_KEYS = {"label", "paper", "description", "set", "seeds", "controls"}
REPORT_KEYS = {"resource_groups", "claims", "insert_into", "answers_into", "pivot", "other_budgets"}
CLAIM_KEYS = {"paper", "system", "group", "metric", "expect", "effect", "note", "against"}
CLAIM_METRICS = ("bleu", "chrfpp", "off_target")
# the comparison's fixed points: a system that changes them is not compared at an equal budget
FIXED_KEYS = ("data", "tokenizer.vocab_size", "tokenizer.model_type", "tokenizer.character_coverage",
              "tokenizer.temperature", "tokenizer.sample_size", "tokenizer.seed", "tokenizer.path",
              "training.max_steps", "training.per_device_train_batch_size", "training.gradient_accumulation_steps",
              "training.seed", "training.data_seed", "evaluation")  # fmt: skip


@dataclass
class System:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    paper: str = ""
    description: str = ""
    seeds: list[int] | None = None  # None: the suite's
    controls: list[str] = field(default_factory=list)  # the matched controls it asks for (controls.py)
    control: Control | None = None  # set on a control the suite made: what it matches, for which systems


@dataclass
class Suite:
    """A parsed, checked suite file (see the module docstring)."""

    name: str
    path: Path
    base: dict[str, Any]
    systems: dict[str, System]
    seeds: list[int]
    baseline: str
    output_dir: Path
    results_dir_setting: Path | None = None  # None: <output_dir>/results
    report: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def results_dir(self) -> Path:
        return self.results_dir_setting or self.output_dir / "results"

    def system_config(self, system: str) -> dict[str, Any]:
        """The base experiment with `system`'s overrides applied (no output_dir, seed or shared paths yet)."""
        config = copy.deepcopy(self.base)
        set_keys(config, copy.deepcopy(self.systems[system].overrides))
        return config

    def seeds_of(self, system: str) -> list[int]:
        """The seeds `system` runs with: its own list, or the suite's."""
        return self.systems[system].seeds or self.seeds

    def select(self, systems: list[str] | None = None, seeds: list[int] | None = None) -> Suite:
        """The same suite restricted to some systems (the baseline always stays) and seeds (for every system)."""
        if systems:
            unknown = [s for s in systems if s not in self.systems]
            if unknown:
                raise ConfigError(f"{self.path}: unknown systems {unknown}; the suite has {list(self.systems)}.")
        if seeds:  # the suite file's rule for the command line's seeds (a negative one failed every run)
            seeds = _check_seeds(seeds, f"{self.path} --seeds")
        keep = [s for s in self.systems if not systems or s in systems or s == self.baseline]
        chosen = {s: replace(self.systems[s], seeds=None) if seeds else self.systems[s] for s in keep}
        return replace(self, systems=chosen, seeds=seeds or self.seeds)

    def including(self, other: Suite) -> Suite:
        """This suite with the runs of `other` (a selection of it) added, so that a run of extra seeds
        (`--seeds 4,5`) is reported beside the suite's own instead of replacing its report."""
        systems = {
            name: replace(system, seeds=sorted(set(self.seeds_of(name)) | set(other.seeds_of(name))))
            if name in other.systems else system
            for name, system in self.systems.items()
        }  # fmt: skip
        return replace(self, systems=systems, output_dir=other.output_dir)

    @property
    def runs(self) -> list[tuple[str, int]]:
        """(system, seed) in the order they run: the baseline first, then system by system."""
        return [(system, seed) for system in self.systems for seed in self.seeds_of(system)]


def _where(path: Path, system: str | None = None) -> str:
    return f"{path}" + (f", system {system!r}" if system else "")


def _touches(key: str, fixed: str) -> bool:
    return key == fixed or key.startswith(fixed + ".") or fixed.startswith(key + ".")


def load_suite(path: str | os.PathLike, build_models: bool = True) -> Suite:
    """Read and check a suite file: every system's config is validated before anything runs.

    `build_models=False` skips building each system's model on the meta device (and reading a pretrained start's
    config): what a report of finished runs needs, so `compare --report-only` works where the checkpoint a suite
    started from is not.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Suite {path} does not exist; see examples/suites/ for suites to start from.")
    raw = read_config_file(path)
    check_keys(raw, SUITE_KEYS, str(path))
    for key in ("name", "output_dir", "base", "systems", "seeds", "baseline"):
        if key not in raw:
            raise ConfigError(f"{path}: `{key}` is required (see hf_langspec.compare.suite for the layout).")
    for text_field in ("name", "output_dir", "results_dir", "description"):
        if raw.get(text_field) is not None and not isinstance(raw[text_field], str):
            raise ConfigError(
                f"{path}: {text_field} must be text, got {type(raw[text_field]).__name__} {raw[text_field]!r}."
            )
    seeds = _check_seeds(raw["seeds"], str(path))
    base = check_keys(
        raw["base"], {"data", "tokenizer", "model", "training", "stages", "evaluation"}, f"{path} [base]"
    )
    systems = {}
    for name, entry in check_keys(raw["systems"], set(raw["systems"]), f"{path} [systems]").items():
        if name in CONTROL_KINDS:  # a claim's `against: parameters` names the system's control of that kind
            raise ConfigError(f"{path} [systems]: {name!r} names a kind of control; call the system otherwise.")
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(
                f"{path} [systems]: name {name!r} must be letters, digits, '-' or '_' (it names folders)."
            )
        entry = check_keys(entry or {}, SYSTEM_KEYS, f"{path} [systems.{name}]")
        for text_field in ("label", "paper", "description"):  # read by the report, after every run trained
            if text_field in entry and not isinstance(entry[text_field], str):
                raise ConfigError(
                    f"{path} [systems.{name}]: {text_field} must be text, got {type(entry[text_field]).__name__} "
                    f"{entry[text_field]!r}."
                )
        overrides = check_keys(
            entry.get("set", {}) or {}, set(entry.get("set", {}) or {}), f"{path} [systems.{name}.set]"
        )
        own_seeds = _check_seeds(entry["seeds"], f"{path} [systems.{name}]") if "seeds" in entry else None
        systems[name] = System(
            name,
            overrides,
            entry.get("label", name),
            entry.get("paper", ""),
            entry.get("description", ""),
            own_seeds,
            _check_controls(entry.get("controls", []), f"{path} [systems.{name}]"),
        )
    if raw["baseline"] not in systems:
        raise ConfigError(f"{path}: baseline {raw['baseline']!r} is not one of the systems {list(systems)}.")
    report = check_keys(raw.get("report", {}) or {}, REPORT_KEYS, f"{path} [report]")
    output_dir = Path(raw["output_dir"])
    suite = Suite(
        name=str(raw["name"]), path=path, base=base, systems=systems, seeds=list(seeds), baseline=raw["baseline"],
        output_dir=output_dir, results_dir_setting=Path(raw["results_dir"]) if raw.get("results_dir") else None,
        report=report,
        description=raw.get("description", ""),
    )  # fmt: skip
    _add_controls(suite)
    for name in suite.systems:
        check_system(suite, name, build_model=build_models and suite.systems[name].control is None)
    baseline_config = suite.system_config(suite.baseline)
    for name in suite.systems:
        if name != suite.baseline and suite.system_config(name) == baseline_config:
            raise ConfigError(
                f"{path} [systems.{name}]: trains exactly the baseline's model and schedule (its `set` changes "
                "nothing), so the report would judge the method on the baseline; give its method's settings "
                "(e.g. model.class) or remove it."
            )
    _check_report(report, suite.name, path)
    for i, claim in enumerate(report.get("claims", [])):
        _check_claim(suite, claim, f"{path} [report.claims][{i}]")
    _check_other_budgets(report.get("other_budgets", []), path)
    return suite


def _check_seeds(seeds: Any, where: str) -> list[int]:
    # numpy seeds are 0 .. 2**32 - 1: a negative one failed each run once the shared corpus and tokenizer were built
    if not (
        isinstance(seeds, list)
        and seeds
        and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in seeds)
    ):
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers from 0 to 2**32 - 1, got {seeds!r}.")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}: seeds {seeds} repeat a seed.")
    return list(seeds)


def _check_controls(kinds: Any, where: str) -> list[str]:
    if not (isinstance(kinds, list) and all(k in CONTROL_KINDS for k in kinds) and len(set(kinds)) == len(kinds)):
        raise ConfigError(f"{where}: controls must be a list of {list(CONTROL_KINDS)}, each once, got {kinds!r}.")
    return list(kinds)


def _add_controls(suite: Suite) -> None:
    """The matched controls the systems ask for, added as systems after them (see controls.py)."""
    requests = {name: system.controls for name, system in suite.systems.items() if system.controls}
    if not requests:
        return
    if suite.baseline in requests:
        raise ConfigError(f"{suite.path} [systems.{suite.baseline}]: the baseline is what controls widen; ask for "
                          "controls on the methods' systems.")  # fmt: skip
    if suite.system_config(suite.baseline).get("model", {}).get("class", "baseline") != "baseline":
        raise ConfigError(f"{suite.path}: controls widen the plain Transformer; the baseline system "
                          f"{suite.baseline!r} is another model class.")  # fmt: skip
    try:
        controls = plan_controls(requests, suite.system_config, suite.baseline)
    except (ConfigError, ValueError, TypeError) as err:
        raise ConfigError(f"{suite.path}: {err}") from None
    for name, control in controls.items():
        if name in suite.systems:
            raise ConfigError(f"{suite.path} [systems.{name}]: the name is the control of {control.systems[0]!r}; "
                              "rename the system.")  # fmt: skip
        owners = [suite.seeds_of(s) for s in control.systems]
        seeds = sorted({seed for own in owners for seed in own})
        suite.systems[name] = System(
            name, dict(control.settings), control_label(control), paper="matched control",
            description=f"The baseline widened ({control.widened}) to the {control.kind} of {', '.join(control.systems)}.",
            seeds=None if seeds == suite.seeds else seeds, control=control,
        )  # fmt: skip


def control_of(suite: Suite, system: str, kind: str) -> str | None:
    """The name of `system`'s matched control of `kind` (parameters, compute), if the suite has one."""
    return next((n for n, s in suite.systems.items() if s.control and s.control.kind == kind
                 and system in s.control.systems), None)  # fmt: skip


def _check_report(report: dict[str, Any], name: str, path: Path) -> None:
    """The [report] settings the report reads once every run has trained: refused now, not hours later."""
    where = f"{path} [report]"
    if not isinstance(report.get("pivot", "en"), str):
        raise ConfigError(f"{where}: pivot must be a language code like en, got {report['pivot']!r}.")
    resource = report.get("resource_groups")
    if resource is not None:
        bounds = check_keys(resource, {"low_below", "high_from"}, f"{where} resource_groups")
        if set(bounds) != {"low_below", "high_from"} or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in bounds.values()
        ):
            raise ConfigError(
                f"{where}: resource_groups needs whole numbers {{low_below: N, high_from: M}}, got {resource}."
            )
        if bounds["low_below"] > bounds["high_from"]:
            raise ConfigError(
                f"{where}: resource_groups low_below={bounds['low_below']} exceeds high_from={bounds['high_from']}."
            )
    for key, kind in (("insert_into", "compare"), ("answers_into", "answers")):
        targets = report.get(key, [])
        if not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
            raise ConfigError(f"{where}: {key} must be a list of files, e.g. [README.md], got {targets!r}.")
        for target in targets:
            problem = insertion_problem(Path(target), name, kind)
            if problem:
                raise ConfigError(f"{where} {key}: {problem}")


def _check_claim(suite: Suite, claim: Any, where: str) -> None:
    check_keys(claim, CLAIM_KEYS, where)
    missing = sorted({"paper", "system", "group", "metric", "expect"} - set(claim))
    if missing:
        raise ConfigError(f"{where}: give {missing}.")
    if claim["system"] not in suite.systems:
        raise ConfigError(f"{where}: system {claim['system']!r} is not in the suite ({list(suite.systems)}).")
    if claim["metric"] not in CLAIM_METRICS or claim["expect"] not in ("up", "down"):
        raise ConfigError(f"{where}: metric must be one of {list(CLAIM_METRICS)} and expect up or down, got {claim}.")
    groups = group_names(suite.report.get("pivot", "en"), suite.report.get("resource_groups"))
    group = claim["group"]  # an --eval-set's groups ("eval:NAME supervised") are named on the command line
    if group not in groups and not str(group).startswith("eval:"):  # was "not measured (runs missing)" at the end
        raise ConfigError(f"{where}: group {claim['group']!r} is not a group of the report; use one of {groups}.")
    against = claim.get("against", suite.baseline)  # the row it is judged against: a control on the same schedule
    if against in CONTROL_KINDS:  # `against: parameters`: the system's matched control of that kind, by its name
        control = control_of(suite, claim["system"], against)
        if control is None:
            raise ConfigError(
                f"{where}: against {against!r} needs `controls: [{against}]` on system {claim['system']!r}."
            )
        claim["against"] = against = control
    if against not in suite.systems or against == claim["system"]:
        raise ConfigError(
            f"{where}: against {against!r} must be another system of the suite ({list(suite.systems)}); leave it out "
            "to judge the claim against the baseline."
        )


def _check_other_budgets(others: Any, path: Path) -> None:
    """Suite files, not this one (they are read when the report is built, so a loop of suites cannot recurse)."""
    where = f"{path} [report.other_budgets]"
    if not (isinstance(others, list) and all(isinstance(o, str) for o in others)):
        raise ConfigError(f"{where}: a list of suite files, got {others!r}.")
    for other in others:
        if not Path(other).is_file():
            raise ConfigError(
                f"{where}: {other} is not a file (a suite's paths are relative to the folder compare runs in, here "
                f"{Path.cwd()}; the shipped suites run from the repository root); name other suites' YAML files."
            )
        if Path(other).resolve() == path.resolve():
            raise ConfigError(f"{where}: {other} is this suite; name the suites run at other budgets.")


def check_system(suite: Suite, name: str, build_model: bool = True) -> None:
    """Refuse a system whose overrides name unknown keys, break the equal budget, or build no model.

    Everything is checked on the config and (with `build_model`) on a model built on the `meta` device (no
    memory, no weights), so a typo in the last system fails in a second, before the first one trains.
    """
    where = _where(suite.path, name)
    overrides = suite.systems[name].overrides
    for key in overrides:
        fixed = next((f for f in FIXED_KEYS if _touches(key, f)), None)
        if fixed is not None:
            raise ConfigError(
                f"{where}: `{key}` changes {fixed}, which every system shares (equal data, vocabulary, budget and "
                "evaluation); set it in [base] instead."
            )
    try:
        config = suite.system_config(name)
        validate_config({"output_dir": "unused", **config}, where)
    except ConfigError as err:
        message = str(err)
        raise ConfigError(message if message.startswith(str(suite.path)) else f"{where}: {message}") from None
    budget = training_budget(config)
    reference = training_budget(suite.system_config(suite.baseline))
    if budget != reference:
        raise ConfigError(
            f"{where}: trains {budget[0]} steps x {budget[1]} examples where the baseline trains {reference[0]} x "
            f"{reference[1]}; equal budgets: make its stages' max_steps add up to {reference[0]}."
        )
    if build_model:
        check_model_settings(config, where, build=True)


def training_budget(config: dict[str, Any]) -> tuple[int, int]:
    """(steps, examples per step) over all stages: HLT-MT's two stages count against one total."""
    training = config.get("training", {})
    batch = int(training.get("per_device_train_batch_size", 8)) * int(training.get("gradient_accumulation_steps", 1))
    stages = config.get("stages") or [{}]
    steps = sum(int({**training, **stage.get("training", {})}.get("max_steps", -1)) for stage in stages)
    return steps, batch


__all__ = ["Suite", "System", "check_system", "control_of", "load_suite", "training_budget"]
