"""Train, evaluate and package a multilingual translation model from one config file.

    python examples/train_translation.py --config examples/configs/bible_baseline_cpu.yaml --set training.max_steps=40
    .venv/bin/accelerate launch --config_file examples/accelerate/ddp.yaml examples/train_translation.py --config ...
    # on CPU, several processes: .venv/bin/accelerate launch --multi_gpu --num_processes 2 ... (with training.use_cpu: true)

Exactly `hf-langspec train` (the same options: --config, --set, --output-dir, --no-resume, and its one-line
errors), as a script that `accelerate launch` can start; see hf_langspec/training/experiment.py for the config.
"""

from __future__ import annotations

import sys

from hf_langspec_cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
