"""A run as steps, each a module with one job that takes what it needs and returns a dataclass: `data` (the corpus
and held-out rows as `RunData`, the tokenized `TrainingSet`, the validation sets), `tokenizer`, `model`
(`BuiltModel`), `train` (the config's training stages, then the saved model: `Trained`) and `evaluate` (scores,
results, card). `context.RunContext` is what every step shares (the output folder, the process's arguments, its
announcer). `training.experiment.run_experiment` composes them; no step imports another. ("Stage" is the
config's word: HLT-MT's `stages:` of training.)"""
