"""A run as named stages, each a module with one job and typed inputs and outputs: `data` (the corpus, the
tokenized training set, the validation sets), `tokenizer`, `model`, `train` (the config's stages, then the saved
model) and `evaluate` (scores, results, card). `training.experiment.run_experiment` composes them; `compare`'s
workers, `curve` and the pretrained start run through it."""
