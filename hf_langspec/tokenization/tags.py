"""Language tags: what a tag template must be to give every language its own tag (checked where a tokenizer is
made from a config, before it trains)."""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from .tokenization_langspec import SPECIAL_TOKENS


def tag_template_problem(template: Any, languages: Sequence[str] = ()) -> str | None:
    """Why `template` cannot make the languages' tags, or None. A template is text with exactly one `{}` where the
    code goes (without it every language gets the same tag; other fields fail or ignore the code), and each tag it
    makes must be distinct, not a special token, and not a plain word: a tag of letters and digits only (`{}` with
    `de`) would be a word of the text, which the model then never sees as text."""
    example = "one {} where the code goes, like '<2{}>' (Johnson et al.), '__{}__' (M2M-100) or '>>{}<<' (Marian)"
    if not isinstance(template, str):
        return f"lang_tag_template must be text with {example}; got {template!r}."
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]  # fmt: skip
    except ValueError as err:
        return f"lang_tag_template={template!r} is not a format string ({err}); write it with {example}."
    if fields != [("", "", None)]:
        what = "no field: every language would get the same tag" if not fields else f"fields {fields}"
        return f"lang_tag_template={template!r} has {what}; write it with exactly {example}."
    tags = {code: template.format(code) for code in languages}
    specials = {tag: code for code, tag in tags.items() if tag in SPECIAL_TOKENS.values()}
    if specials:
        return f"lang_tag_template={template!r} makes special tokens the tags of {specials}; choose another template."
    words = [tag for tag in tags.values() if tag.isalnum()]
    if words:
        return (
            f"lang_tag_template={template!r} makes tags {words} that are plain words of the text (a word equal to a "
            f"tag would be read as the tag); write it with {example}."
        )
    return None


def check_tag_template(template: Any, languages: Sequence[str] = ()) -> None:
    """Raise a ValueError with `tag_template_problem`'s reason, if there is one."""
    problem = tag_template_problem(template, languages)
    if problem:
        raise ValueError(problem)


__all__ = ["check_tag_template", "tag_template_problem"]
