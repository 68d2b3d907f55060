"""Model card templates (Jinja, for `huggingface_hub.ModelCard.from_template`), shipped as hf_langspec.model_cards."""
