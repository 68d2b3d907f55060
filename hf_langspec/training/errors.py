"""The error a bad experiment config raises: one line that names the key and the fix (the CLI prints it alone)."""


class ConfigError(ValueError):
    """A config that names an unknown key or an impossible value."""


__all__ = ["ConfigError"]
