"""Matched controls: the plain Transformer widened to a method's parameters or to its training compute.

A language-specific method adds parameters (LSL's per-language layers double the encoder here), and some add
compute per token (CLL's parallel FFN, HLT-MT's adapters); a gain over the baseline alone cannot tell the method
from its size. LSL (Pires et al. 2023) and LMS (Xu et al. 2023) answer it by comparing with dense models of equal
parameters and of equal compute; a suite asks for the same per system:

```yaml
systems:
  lsl: {set: {model.class: lsl, ...}, controls: [parameters]}
  fcll: {set: {model.class: cll, ...}, controls: [parameters, compute]}
report:
  claims:
    - {system: lsl, against: parameters, group: xx-en, metric: bleu, expect: up, paper: LSL}
```

Each control is the suite's baseline with wider layers, solved on the `meta` device (no memory, no weights):

* `parameters`: the total parameter count (shared weights once) within 1% of the method's;
* `compute`: the matmul FLOPs of one training step (forward and backward, `torch.utils.flop_counter`) per target
  token within 2% of the method's, on a batch of one sequence per trained direction of half the data's
  `max_length` tokens each, as a GPU computes it (routing gathers per-example weights; CLL's layers run on every
  row and are masked for the central language). A model that draws its route per training step (HLT-MT's soft or
  hard pool, equation 6) is measured as the mean of `ROUTE_DRAWS` seeded steps.

The FFN width of both stacks is widened first (the same number of units added to the encoder's and the
decoder's); where that alone would need more than `MAX_FFN_RATIO` times `d_model`, `d_model` grows instead (in
steps of the heads' count, the FFN keeping the baseline's ratio to it) to the largest width under the target, and
the FFN width then lands it. The control says which (`widened`). A method whose compute per token is within
`COMPUTE_DIFFERENCE` of the baseline's has the baseline as its compute-matched control, so asking for one is
refused. Systems whose targets one control meets within the tolerance share it (the first system names it).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from hf_langspec_cli.config_file import ConfigError, set_keys

from ..modeling.registry import model_classes
from ..training.config import DATA_DEFAULTS
from ..training.model_check import build_model_config, run_directions, run_languages

CONTROL_KINDS = ("parameters", "compute")
TOLERANCE = {"parameters": 0.01, "compute": 0.02}  # relative distance of the control from its target
COMPUTE_DIFFERENCE = 0.05  # below this relative difference in compute, the baseline is the compute control
MAX_FFN_RATIO = 8  # FFN width / d_model beyond which d_model grows (Transformer-base and -big: 4)
NAME_PREFIX = {"parameters": "control_params_", "compute": "control_compute_"}
ROUTE_DRAWS = 32  # seeded steps averaged for a model that draws its route per step (HLT-MT's equation 6)
FFN_KEYS = ("model.encoder_ffn_dim", "model.decoder_ffn_dim")


@dataclass(frozen=True)
class ModelSize:
    """What a control is matched on: the total parameters and the training FLOPs per target token."""

    parameters: int
    flops_per_target_token: float

    def of(self, kind: str) -> float:
        return self.parameters if kind == "parameters" else self.flops_per_target_token


@dataclass
class Control:
    """A solved control: its `set` over the baseline, what it measures, and the systems it serves."""

    kind: str
    systems: list[str]
    target: float  # the first system's size of this kind
    measured: ModelSize
    settings: dict[str, int]
    widened: str  # "FFN width" or "d_model and FFN width"

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "measured": asdict(self.measured)}


def trained_directions(config: dict[str, Any], languages: list[str]) -> list[str]:
    """The directions a run trains where the config decides them (a Bible corpus), every pair otherwise."""
    return run_directions(config) or [f"{a}-{b}" for a in languages for b in languages if a != b]


def measure(config: dict[str, Any]) -> ModelSize:
    """The parameters and training FLOPs per target token of the model a run config builds (see the module)."""
    key = json.dumps(config, sort_keys=True, default=str)
    return ModelSize(_measure(key, "parameters"), _measure(key, "compute"))


def measure_kind(config: dict[str, Any], kind: str) -> float:
    """One of `measure`'s two numbers: the parameters alone need no forward pass."""
    return _measure(json.dumps(config, sort_keys=True, default=str), kind)


@lru_cache(maxsize=1024)
def _measure(config_json: str, kind: str) -> float:
    config = json.loads(config_json)
    model = dict(config.get("model", {}))
    if {"init_from", "init_from_pretrained", "init_encoder_from"} & set(model):
        raise ConfigError(
            "[controls] a model started from a saved or pretrained checkpoint has no plain Transformer of its "
            "shape to widen; controls are for models trained from scratch."
        )
    languages = run_languages(config)
    directions = trained_directions(config, languages)
    model.setdefault("language_pairs", directions)
    model_config = build_model_config(model, languages, config.get("tokenizer", {}))
    model_class = model_classes()[model.get("class", "baseline")][1]
    with torch.device("meta"):
        built = model_class(model_config)
    if kind == "parameters":
        return sum(p.numel() for p in built.parameters())
    length = max(2, int(config.get("data", {}).get("max_length") or DATA_DEFAULTS["max_length"]) // 2)
    index = {code: i for i, code in enumerate(languages)}
    pairs = [d.split("-") for d in directions]
    source = torch.tensor([index[s] for s, _ in pairs], device="meta")
    target = torch.tensor([index[t] for _, t in pairs], device="meta")
    tokens = torch.empty(len(pairs), length, dtype=torch.long, device="meta")
    built.train()

    def step_flops(seed: int) -> tuple[float, bool]:
        with torch.random.fork_rng(devices=[]), FlopCounterMode(display=False) as counter:
            torch.manual_seed(seed)
            before = torch.get_rng_state()
            output = built(
                input_ids=tokens, attention_mask=torch.ones_like(tokens), labels=tokens,
                src_lang_ids=source, tgt_lang_ids=target,
            )  # fmt: skip
            output.loss.backward()
            drew = not torch.equal(before, torch.get_rng_state())
        return counter.get_total_flops() / tokens.numel(), drew

    flops, drew = step_flops(0)
    if drew:  # a route drawn per step (HLT-MT's equation 6): the mean over seeded steps
        flops = sum(step_flops(seed)[0] for seed in range(ROUTE_DRAWS)) / ROUTE_DRAWS
    return flops


def _shape(config: dict[str, Any]) -> dict[str, int]:
    """The baseline's d_model, FFN widths and head counts, its config class's defaults where the suite is silent."""
    model = config.get("model", {})
    built = build_model_config(dict(model), run_languages(config), config.get("tokenizer", {}))
    return {key: int(getattr(built, key)) for key in ("d_model", "encoder_ffn_dim", "decoder_ffn_dim",
                                                       "encoder_attention_heads", "decoder_attention_heads")}  # fmt: skip


def _closest(size: Callable[[int], float], low: int, high: int, target: float) -> int:
    """The integer in [low, high] whose size is closest to `target`, for a size that grows with its argument.

    Interpolation search: parameters and matmul FLOPs are linear in the FFN width, so it lands in a few builds."""
    size_low, size_high = size(low), size(high)
    if target <= size_low or target >= size_high:
        return low if target <= size_low else high
    while high - low > 1:
        guess = low + round((target - size_low) * (high - low) / (size_high - size_low))
        middle = min(max(guess, low + 1), high - 1)
        value = size(middle)
        low, size_low, high, size_high = (
            (middle, value, high, size_high) if value <= target else (low, size_low, middle, value)
        )
    return low if target - size_low <= size_high - target else high


def solve_control(baseline: dict[str, Any], kind: str, target: float) -> tuple[dict[str, int], ModelSize, str]:
    """The baseline config's `set` that brings its `kind` within `TOLERANCE` of `target` (see the module)."""
    shape = _shape(baseline)
    encoder_ffn, decoder_ffn, d_model = shape["encoder_ffn_dim"], shape["decoder_ffn_dim"], shape["d_model"]

    def settings(d: int, added: int) -> dict[str, int]:
        scale = d / d_model  # the FFN keeps the baseline's ratio to d_model, then gains `added` units
        widths = (round(encoder_ffn * scale) + added, round(decoder_ffn * scale) + added)
        return {**({"model.d_model": d} if d != d_model else {}), **dict(zip(FFN_KEYS, widths, strict=True))}

    def size_of(d: int, added: int) -> float:
        config = copy.deepcopy(baseline)
        set_keys(config, settings(d, added))
        return measure_kind(config, kind)

    def land(d: int) -> int:  # the added FFN units at width d closest to the target, within MAX_FFN_RATIO
        narrowest = 1 - min(round(encoder_ffn * d / d_model), round(decoder_ffn * d / d_model))
        widest = MAX_FFN_RATIO * d - max(round(encoder_ffn * d / d_model), round(decoder_ffn * d / d_model))
        return _closest(lambda added: size_of(d, added), narrowest, max(widest, narrowest), target)

    widened, d = "FFN width", d_model
    added = land(d)
    if abs(size_of(d, added) - target) > TOLERANCE[kind] * target and size_of(d, added) < target:
        widened, step = (
            "d_model and FFN width",
            math.lcm(shape["encoder_attention_heads"], shape["decoder_attention_heads"]),
        )
        high = 1
        while size_of(d_model + high * step, 0) <= target:  # the d_model steps that pass the target, doubling
            high *= 2
        steps = _closest(lambda k: size_of(d_model + k * step, 0), 0, high, target)
        if size_of(d_model + steps * step, 0) > target:  # the largest width under the target; the FFN lands it
            steps -= 1
        d = d_model + steps * step
        added = land(d)
    reached = size_of(d, added)
    if abs(reached - target) > TOLERANCE[kind] * target:
        raise ConfigError(
            f"[controls] no widening of the baseline reaches {kind} {target:,.0f} within {TOLERANCE[kind]:.0%} (the "
            f"closest: {reached:,.0f} at {settings(d, added)}); compare at another size."
        )
    chosen = settings(d, added)
    config = copy.deepcopy(baseline)
    set_keys(config, chosen)
    return chosen, measure(config), widened


def plan_controls(
    requests: dict[str, list[str]], config_of: Callable[[str], dict[str, Any]], baseline: str
) -> dict[str, Control]:
    """The controls that `requests` ({system: [kinds]}, in the suite's order) need, by their system names; systems
    whose targets one control meets within the tolerance share it."""
    controls: dict[str, Control] = {}
    for system, kinds in requests.items():
        for kind in kinds:
            target = measure_kind(config_of(system), kind)
            base = measure_kind(config_of(baseline), kind)
            if kind == "compute" and abs(target / base - 1) <= COMPUTE_DIFFERENCE:
                raise ConfigError(
                    f"[systems.{system}] controls: its training FLOPs per target token are "
                    f"{target / base - 1:+.1%} of the baseline's (within {COMPUTE_DIFFERENCE:.0%}): "
                    "the baseline is its compute-matched control; drop `compute`."
                )
            shared = next(
                (c for c in controls.values()
                 if c.kind == kind and abs(c.measured.of(kind) - target) <= TOLERANCE[kind] * target),
                None,
            )  # fmt: skip
            if shared is not None:
                shared.systems.append(system)
                continue
            settings, measured, widened = solve_control(config_of(baseline), kind, target)
            controls[NAME_PREFIX[kind] + system] = Control(kind, [system], target, measured, settings, widened)
    return controls


def control_label(control: Control) -> str:
    """A control's row label: the shape and what it matches, e.g. "Transformer, FFN 990 (parameters of lms)"."""
    values = control.settings
    encoder, decoder = (values[key] for key in FFN_KEYS)
    shape = f"FFN {encoder}" + (f"/{decoder}" if encoder != decoder else "")
    if "model.d_model" in values:
        shape = f"d_model {values['model.d_model']}, {shape}"
    matched = ", ".join(control.systems)
    what = "parameters" if control.kind == "parameters" else "training FLOPs per token"
    return f"Transformer, {shape} ({what} of {matched})"


def control_lines(described: dict[str, dict[str, Any]]) -> list[str]:
    """One line per control (`Control.describe()` by name): what it matches, for whom, its settings and its size."""
    lines = []
    for name, control in described.items():
        kind, target = control["kind"], control["target"]
        reached = ModelSize(**control["measured"]).of(kind)
        settings = ", ".join(f"{k.removeprefix('model.')} {v}" for k, v in control["settings"].items())
        lines.append(
            f"- `{name}`: {kind} of {', '.join(control['systems'])} ({target:,.0f}; this control {reached:,.0f}, "
            f"{reached / target - 1:+.2%}); widened: {control['widened']} ({settings}); "
            f"{control['measured']['parameters']:,} parameters, "
            f"{control['measured']['flops_per_target_token']:,.0f} training FLOPs per target token."
        )
    return lines


__all__ = [
    "COMPUTE_DIFFERENCE",
    "CONTROL_KINDS",
    "MAX_FFN_RATIO",
    "TOLERANCE",
    "Control",
    "ModelSize",
    "control_label", "control_lines",
    "measure",
    "plan_controls",
    "solve_control",
    "trained_directions",
]  # fmt: skip
