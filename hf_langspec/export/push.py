"""Publishing a saved model folder (weights, code, tokenizer, card) to the Hugging Face Hub."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "README.md")


def push_model(
    model_dir: str | os.PathLike,
    repo_id: str,
    api: Any | None = None,
    private: bool = False,
    commit_message: str = "Upload hf_langspec model",
    token: str | None = None,
) -> str:
    """Create `repo_id` if needed and upload `model_dir`; returns the commit URL.

    `api` is a `huggingface_hub.HfApi` (the default) or any object with `create_repo` and `upload_folder`,
    which is how tests exercise this without a Hub.
    """
    folder = Path(model_dir)
    missing = [name for name in REQUIRED if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {missing}; push a folder written by `hf-langspec train` (model, tokenizer and card) "
            "or add the card with `hf-langspec card`."
        )
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    api.create_repo(repo_id=repo_id, private=private, exist_ok=True, repo_type="model")
    commit = api.upload_folder(
        folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message
    )
    return str(getattr(commit, "commit_url", commit))


__all__ = ["push_model"]
