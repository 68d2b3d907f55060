"""Train, evaluate and package a multilingual translation model from one config file.

    python examples/train_translation.py --config examples/configs/bible_baseline_cpu.yaml
    accelerate launch --config_file examples/accelerate/ddp.yaml examples/train_translation.py --config ...
    # on CPU, several processes: accelerate launch --multi_gpu --num_processes 2 ... (with training.use_cpu: true)

The same as `hf-langspec train --config ...`; see hf_langspec/training/experiment.py for the config sections.
"""

from __future__ import annotations

import argparse

from hf_langspec.training.experiment import load_config, run_experiment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--output-dir", help="overrides the config's output_dir")
    parser.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    args = parser.parse_args()
    config = load_config(args.config)
    if args.output_dir:
        config["output_dir"] = args.output_dir
    run_experiment(config, resume=not args.no_resume)


if __name__ == "__main__":
    main()
