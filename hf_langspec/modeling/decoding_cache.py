"""The decoding cache under either of its transformers names, and the length of a static one."""

from __future__ import annotations

from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

# transformers 5.24 renamed the decoding cache `past_key_values` -> `cache`, as a forward argument and as
# an output field (the old names deprecated until 5.40). generate() passes the cache under the new name and
# reads it back from the output's field: a forward that ignored `cache` decoded every step from an empty
# cache. The forwards take either name; outputs set the field the installed version declares.
CACHE_FIELD = (
    "cache" if "cache" in BaseModelOutputWithPastAndCrossAttentions.__dataclass_fields__ else "past_key_values"
)


def resolve_cache(cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    """The decoding cache, given under its transformers >= 5.24 name `cache` or the older `past_key_values`."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("Pass the decoding cache once, as `cache` (or its older name `past_key_values`), not both.")
    return cache if cache is not None else past_key_values


def cache_output(cache: Cache | None) -> dict[str, Cache | None]:
    """`{field: cache}` for a model output, under the field name of the installed transformers."""
    return {CACHE_FIELD: cache}


def cache_of(outputs) -> Cache | None:
    """The decoding cache of a model output, read from the installed transformers' field."""
    return getattr(outputs, CACHE_FIELD)


def static_cache_length(cache: Cache | None) -> int | None:
    """The number of slots of a static self-attention cache (transformers' `StaticCache`, made by
    `generate(..., cache_implementation="static")`), or None for a growing one."""
    if cache is None:
        return None
    self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
    if isinstance(self_cache, DynamicCache):  # a growing cache (its layers appear as it grows)
        return None
    if hasattr(self_cache, "get_max_cache_shape"):  # before transformers 5.2x
        length = self_cache.get_max_cache_shape()
    else:  # per layer; -1 where a layer has no maximum
        length = self_cache.get_max_length(0)
    return length if isinstance(length, int) and length > 0 else None


__all__ = ["CACHE_FIELD", "cache_of", "cache_output", "resolve_cache", "static_cache_length"]
