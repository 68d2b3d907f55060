"""Publishing a saved model folder (weights, code, tokenizer, card) to the Hugging Face Hub."""

from __future__ import annotations

import contextlib
import glob
import inspect
import json
import os
import subprocess
import sys
import tempfile
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import transformers
from huggingface_hub import HfApi

from .. import modeling, tokenization
from ..model_folder import described_model_problem, load_model_folder
from .card import check_repo_id, rewrite_repo_id

REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "README.md")
# what leaves the machine is a list of names, each a file the model's own save wrote: its configs, weights (as
# safetensors), tokenizer files, card and the package's modeling code. Everything else in the folder (notes,
# scripts, credentials, trainer state, hidden files, subfolders, links) is refused unless named with `include`.
# Pickles (training_args.bin, pytorch_model.bin, optimizer states) can run code when loaded; they stay.
OWN_FILES = {
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json", "README.md",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
    # the vocabularies of the pretrained starts' tokenizers (NLLB, M2M-100, Marian)
    "sentencepiece.bpe.model", "spm.model", "source.spm", "target.spm", "vocab.json", "target_vocab.json",
}  # fmt: skip
PICKLES = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle")


def _code_files() -> set[str]:
    """The modeling and tokenizer code a saved folder carries (transformers copies the package's flat modules)."""
    folders = [Path(modeling.__file__).parent, Path(tokenization.__file__).parent]
    return {path.name for folder in folders for path in folder.glob("*.py") if path.name != "__init__.py"}


def _own_files(folder: Path) -> set[str]:
    """The names the model's own save writes into `folder`: `OWN_FILES`, its weight shards (from the index), its
    tokenizer class's vocabulary files and the package's code."""

    names = set(OWN_FILES) | _code_files()
    index = folder / "model.safetensors.index.json"
    # a damaged index is named by the model folder's own check
    with contextlib.suppress(OSError, ValueError, AttributeError):
        names |= set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
    try:
        tokenizer_class = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["tokenizer_class"]
    except (OSError, ValueError, KeyError, TypeError):
        tokenizer_class = None
    for name in (tokenizer_class, f"{tokenizer_class}Fast") if isinstance(tokenizer_class, str) else ():
        names |= set(getattr(getattr(transformers, name, None), "vocab_files_names", {}).values())
    return names


def files_to_push(folder: str | os.PathLike, include: tuple[str, ...] | list[str] = (),
                  allow_pickles: bool = False) -> list[str]:  # fmt: skip
    """The files of `folder` that `push` uploads: the model's own (`_own_files`) and those named in `include`, each
    a regular file at the top of the folder. Pickles are left behind (uploaded with `allow_pickles`). Anything else
    (a hidden file, a subfolder, a link, a file the save did not write) is a ValueError listing all of them and the
    fix, before anything leaves the machine."""
    folder = Path(folder)
    own = _own_files(folder)
    present = {entry.name: entry for entry in folder.iterdir()}
    absent = sorted(set(include) - set(present))
    if absent:
        raise FileNotFoundError(f"--include names {absent}, which {folder} does not hold (give file names in it).")
    chosen, links, unknown = [], [], []
    for name, entry in sorted(present.items()):
        pickle = any(fnmatch(name, pattern) for pattern in PICKLES)
        if entry.is_symlink():
            links.append(name)
        elif pickle and not allow_pickles:
            continue  # announced and left behind by push_model
        elif entry.is_file() and (name in own or name in include or pickle):
            chosen.append(name)
        else:
            unknown.append(name + ("/" if entry.is_dir() else ""))
    if links:
        raise ValueError(
            f"{folder} holds links {links}: push uploads no link's target; copy the file into the folder (or remove "
            "the link) and push again."
        )
    if unknown:
        raise ValueError(
            f"{folder} holds files that are not the model's own: {unknown}; push uploads only what the model's save "
            "wrote: move them out, or name each one to publish with --include NAME (include=[...])."
        )
    return chosen


def push_model(
    model_dir: str | os.PathLike,
    repo_id: str,
    api: Any | None = None,
    private: bool = False,
    commit_message: str = "Upload hf_langspec model",
    token: str | None = None,
    allow_pickles: bool = False,
    include: tuple[str, ...] | list[str] = (),
) -> str:
    """Create `repo_id` if needed and upload `model_dir`'s safetensors, configs, tokenizer, card and code.

    What is uploaded is a list of names, printed before the upload (`files_to_push`): the files the model's own
    save wrote, and the ones named in `include`; a folder holding anything else is refused with its list. Pickled
    files are left behind (they can run code on the downloader's machine) unless `allow_pickles`. The model is
    loaded first (`load_model_folder`): a damaged folder is refused before anything is uploaded.
    `api` is a `huggingface_hub.HfApi` (the default) or any object with `create_repo` and `upload_folder`,
    which is how tests exercise this without a Hub.
    """
    check_repo_id(repo_id)  # before the folder is read or anything leaves the machine
    folder = Path(model_dir)
    pickles = sorted(p.name for pattern in PICKLES for p in folder.glob(pattern))
    if pickles and not allow_pickles:
        if "pytorch_model.bin" in pickles and not (folder / "model.safetensors").exists():
            raise FileNotFoundError(
                f"{folder} holds its weights as a pickle (pytorch_model.bin); save them as safetensors "
                "(model.save_pretrained(folder)), or pass allow_pickles=True (--allow-pickles) to upload the pickle."
            )
        print(f"Not uploading pickled files {pickles} (they can run code when loaded); --allow-pickles uploads them.")
    pickled_weights = allow_pickles and (folder / "pytorch_model.bin").exists()
    missing = [
        name
        for name in REQUIRED
        if not (folder / name).exists() and not (name == "model.safetensors" and pickled_weights)
    ]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {missing}; push a folder written by `hf-langspec train` (model, tokenizer and card) "
            "or add the card with `hf-langspec card`."
        )
    names = files_to_push(folder, include, allow_pickles)
    if not pickled_weights:  # what is published must load: damaged weights or a config that does not fit them stay
        load_model_folder(folder)
        problem = described_model_problem(folder) or remote_code_problem(folder)
        if problem:
            raise ValueError(f"Not pushing {folder}: {problem}.")
    if api is None:
        api = HfApi(token=token)
    patterns = [glob.escape(name) for name in names]  # exact names: nothing else, at no depth, is matched
    print(f"Uploading to {repo_id}: {', '.join(names)}")
    card = (folder / "README.md").read_text(encoding="utf-8")
    card_for_hub = rewrite_repo_id(card, repo_id)  # the usage code loads what was pushed; the local card stays
    try:
        api.create_repo(repo_id=repo_id, private=private, exist_ok=True, repo_type="model")
        commit = api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message,
            allow_patterns=patterns, ignore_patterns=["README.md"] if card_for_hub != card else None,
        )  # fmt: skip
        if card_for_hub != card:
            commit = api.upload_file(
                path_or_fileobj=card_for_hub.encode("utf-8"), path_in_repo="README.md", repo_id=repo_id,
                repo_type="model", commit_message=f"{commit_message}: model card for {repo_id}",
            )  # fmt: skip
    except Exception as err:  # network and Hub errors: one line that says what to check
        package = type(err).__module__.split(".")[0].rstrip("0123456789")  # httpx, httpx2, httpcore2, ...
        if package not in ("httpx", "httpcore", "requests", "huggingface_hub", "urllib"):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise RuntimeError(
            f"Could not push to the Hugging Face Hub ({type(err).__name__}: {first[:200]}); check the network, the "
            f"repo id {repo_id!r} and your token (`hf auth login` or HF_TOKEN)."
        ) from None
    return str(getattr(commit, "commit_url", commit))


# run in a fresh interpreter where hf_langspec cannot be imported: the folder loads as a downloader's
# `trust_remote_code=True` loads it, from the code it carries; prints a probe's logits
PROBE = r"""
import importlib.abc, json, sys
class NoPackage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hf_langspec" or name.startswith("hf_langspec."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoPackage())
sys.path = [p for p in sys.path if p not in ("", ".")]
from hf_langspec_probe import probe_logits
print(json.dumps(probe_logits(sys.argv[1], remote=True)))
"""


def probe_logits(folder: str, remote: bool = False) -> list[float]:
    """The last position's first logits of a fixed input, the folder loaded with the installed classes or (with
    `remote`) with the code the folder carries; imports only transformers and torch, inside: its source alone is
    the probe's helper module."""
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

    config = AutoConfig.from_pretrained(folder, trust_remote_code=remote)
    seq2seq = "AutoModelForSeq2SeqLM" in (getattr(config, "auto_map", None) or {}) or config.is_encoder_decoder
    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForMaskedLM
    model = auto.from_pretrained(folder, trust_remote_code=remote).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=remote)
    languages = list(getattr(config, "languages", None) or [])
    codes = {"src_lang": languages[0], "tgt_lang": languages[-1]} if languages else {}
    batch = dict(tokenizer(["a b c"], return_tensors="pt", **codes))
    batch.pop("labels", None)
    if seq2seq:
        batch["decoder_input_ids"] = torch.tensor([[config.decoder_start_token_id]])
    with torch.no_grad():
        return model(**batch).logits[0, -1, :16].tolist()


def remote_code_problem(folder: str | os.PathLike) -> str | None:
    """What goes wrong when the folder is loaded from the code it carries (the `.py` files an upload sends, read
    with `trust_remote_code=True` in a process without this package), or None when that gives the installed
    classes' logits."""
    with tempfile.TemporaryDirectory() as helper:
        # probe_logits imports only transformers and torch: its source alone is the helper module
        (Path(helper) / "hf_langspec_probe.py").write_text(inspect.getsource(probe_logits), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": helper}
        result = subprocess.run([sys.executable, "-c", PROBE, str(Path(folder).resolve())], capture_output=True,
                                text=True, env=env, cwd=helper, timeout=600)  # fmt: skip
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return (f"it does not load from the code it would upload ({last[:300]}); save it again with "
                "model.save_pretrained and tokenizer.save_pretrained of this package's classes")  # fmt: skip
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    local = probe_logits(str(folder))
    if max(abs(a - b) for a, b in zip(remote, local, strict=True)) > 1e-4:
        return (
            "the code it would upload computes other outputs than this package's classes (a modified .py "
            "file?); save it again with model.save_pretrained of this package's classes"
        )
    return None


__all__ = ["files_to_push", "probe_logits", "push_model", "remote_code_problem"]
