"""What `hf-langspec serve` translates with: a backend answers `directions`, `source_lengths`, `max_source_tokens`
and `translate(direction, texts)`; the generic model also `translate_mixed(directions, texts)` and `memory()`.

* `CTranslate2Backend`: the folders of `hf-langspec export --directions ...` (one CTranslate2 model per
  direction, the language modules folded in; CTranslate2 keeps no weights outside a model's file, so each
  direction holds its own copy of the shared ones);
* `ModelBackend`: the generic model itself, every direction through one copy of the weights (slower per
  sentence, and the only way for methods that do not fold: CLM, HLT-MT, adapters).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from ..data.schema import check_direction, split_direction
from ..evaluation.translate import translate
from ..export.language_packs import add_language_packs, base_fingerprint
from ..model_folder import json_problem
from ..modeling.modeling_langspec import language_module_parameter
from ..tokenization.tokenization_langspec import encode_with_template
from .ct2 import DIRECTION_FILE, generation_budget, translate_ctranslate2


def _is_direction(name: str) -> bool:
    """Whether a folder name is a direction (`en-de`, `pt_BR-en`): what `export --directions` names its folders."""
    try:
        split_direction(name)
    except ValueError:
        return False
    return True


class CTranslate2Backend:
    """Directions exported by `export_directions`: every `<src>-<tgt>/ctranslate2` folder under `export_dir`."""

    name = "ctranslate2"

    def __init__(self, export_dir: str | Path, device: str = "cpu", threads: int = 1, compute_type: str = "default"):
        import ctranslate2

        export_dir = Path(export_dir)
        folders = sorted(export_dir.glob(f"*/ctranslate2/{DIRECTION_FILE}"))
        command = "`hf-langspec export --model MODEL --directions en-de,de-en --output-dir DIR`"
        if not folders:
            raise ValueError(f"{export_dir} holds no exported direction (no */ctranslate2/{DIRECTION_FILE}); write one with {command}.")  # fmt: skip
        again = f"export it again with {command}"
        # a direction's folder without its files (an interrupted export, a removed folder) is not served silently
        broken = [f.name for f in sorted(export_dir.iterdir()) if f.is_dir() and _is_direction(f.name) and not (f / "ctranslate2" / DIRECTION_FILE).is_file()]  # fmt: skip
        if broken:
            raise ValueError(f"{export_dir}: {', '.join(broken)} has no ctranslate2/{DIRECTION_FILE}; {again}.")
        self.translators, self.tokenizers, self.settings = {}, {}, {}
        for path in folders:
            folder = path.parent
            damaged = next(filter(None, (json_problem(f) for f in sorted(folder.glob("*.json")))), None)
            if damaged:
                raise ValueError(f"Exported direction {folder}: {damaged}; {again}.")
            try:
                settings = json.loads(path.read_text(encoding="utf-8"))
                direction = f"{settings['src_lang']}-{settings['tgt_lang']}"
                translator = ctranslate2.Translator(
                    str(folder), device=device, inter_threads=1, intra_threads=threads, compute_type=compute_type
                )
                self.tokenizers[direction] = AutoTokenizer.from_pretrained(folder)
            except (ValueError, KeyError, TypeError, RuntimeError, OSError) as err:  # JSON, ctranslate2, tokenizers
                reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise ValueError(f"Exported direction {folder} cannot be loaded ({reason}); {again}.") from None
            self.translators[direction], self.settings[direction] = translator, settings

    @property
    def directions(self) -> list[str]:
        return sorted(self.translators)

    def source_lengths(self, direction: str, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in encode_with_template(self.tokenizers[direction], list(texts))]

    def max_source_tokens(self, direction: str) -> int:
        return self.settings[direction]["max_source_tokens"]

    def translate(self, direction: str, texts: list[str]) -> list[str]:
        settings, tokenizer = self.settings[direction], self.tokenizers[direction]
        ids = translate_ctranslate2(
            self.translators[direction], tokenizer, texts, beam_size=settings["beam_size"],
            max_new_tokens=settings["max_new_tokens"], forced_first_token=settings["forced_first_token"],
            length_penalty=settings["length_penalty"], max_input_length=0,
            suppress_sequences=settings.get("suppress_sequences") or None,  # absent in exports made before them
            no_repeat_ngram_size=settings.get("no_repeat_ngram_size", 0),
        )  # fmt: skip
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def _servable(direction: str, config: Any) -> bool:
    try:
        check_direction(*split_direction(direction), config)
    except ValueError:
        return False
    return True


class ModelBackend:
    """The generic model: every direction (or those given) through one copy of the weights, one batch at a time."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, directions: Sequence[str] | None = None):
        tokenizer.check_model(model)
        self.model, self.tokenizer = model.eval(), tokenizer
        languages = model.config.languages
        self._directions = list(directions or [f"{s}-{t}" for s in languages for t in languages if s != t])
        for direction in self._directions:  # refused here as translate() would refuse each request
            check_direction(*split_direction(direction), model.config)
        self._lock = threading.Lock()  # one torch call at a time: concurrent ones would share the same cores
        self._base: str | None = None  # the base's fingerprint, once a language pack is added

    @property
    def directions(self) -> list[str]:
        return sorted(self._directions)

    def add_languages(self, folders: Sequence[str | Path]) -> tuple[list[str], list[str]]:
        """Append the languages of the language packs in `folders` (`export.language_packs`) to the model it serves,
        between two batches; returns them and the directions it serves now that it did not (every direction between
        a new language and the others that the model can translate)."""

        with self._lock:  # no batch runs while the model and its tokenizer grow
            if self._base is None:
                self._base = base_fingerprint(self.model)  # the base never changes: hashed once
            model, added = add_language_packs(self.model, self.tokenizer, list(folders), base=self._base)
            codes = model.config.languages
            new = [f"{s}-{t}" for s in codes for t in codes if s != t and (s in added or t in added)]
            new = [d for d in new if _servable(d, model.config)]
            self.model = model
            self._directions += new
        return added, sorted(new)

    def memory(self) -> dict[str, int]:
        """Bytes of weights: the shared base and the language modules beside it (one copy for every direction)."""

        sizes = {"base_bytes": 0, "language_modules_bytes": 0}
        for name, parameter in self.model.named_parameters():
            key = "language_modules_bytes" if language_module_parameter(name) else "base_bytes"
            sizes[key] += parameter.numel() * parameter.element_size()
        return sizes

    def source_lengths(self, direction: str, texts: Sequence[str]) -> list[int]:
        src, tgt = split_direction(direction)
        return [len(ids) for ids in self.tokenizer(list(texts), src_lang=src, tgt_lang=tgt)["input_ids"]]

    def max_source_tokens(self, direction: str) -> int:
        return self.model.config.max_position_embeddings

    def translate(self, direction: str, texts: list[str]) -> list[str]:
        return self.translate_mixed([direction] * len(texts), texts)

    def translate_mixed(self, directions: list[str], texts: list[str]) -> list[str]:
        """Texts of any directions (one per text) in one batch: one forward and one beam search, each example
        through its own languages' modules."""

        pairs = [split_direction(direction) for direction in directions]
        with self._lock:
            return translate(
                self.model, self.tokenizer, texts, [s for s, _ in pairs], [t for _, t in pairs], batch_size=len(texts),
                max_source_length=None, show_progress=False, one_batch=True, **generation_budget(self.model),
            )  # fmt: skip


__all__ = ["CTranslate2Backend", "ModelBackend"]
