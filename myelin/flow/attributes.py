"""Attributes of variables, operations and blobs: string values with typed accessors.

A flow file stores every attribute value as a string. Values set from Python are converted to
SLING's spellings (bool as "1"/"0", lists and shapes as "[a,b,c]"), and read back with the
typed getters, which also accept the other spellings SLING and its TF extractor write.
"""

from myelin.errors import FlowError

_TRUE = {"1", "t", "true", "yes"}
_FALSE = {"0", "f", "false", "no", ""}


def encode(value):
    """The string form of an attribute value."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(encode(v) for v in value) + "]"
    if hasattr(value, "tolist"):  # NumPy scalars and arrays
        return encode(value.tolist())
    return str(value)


class Attributes(dict):
    """An insertion-ordered mapping of attribute names to string values."""

    def __setitem__(self, name, value):
        super().__setitem__(str(name), encode(value))

    def update(self, other=(), **kwargs):
        for key, value in dict(other, **kwargs).items():
            self[key] = value

    def get_str(self, name, default=None):
        return self.get(name, default)

    def get_int(self, name, default=None):
        value = self.get(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise FlowError(f"attribute {name}={value!r} is not an integer") from None

    def get_float(self, name, default=None):
        value = self.get(name)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise FlowError(f"attribute {name}={value!r} is not a number") from None

    def get_bool(self, name, default=False):
        value = self.get(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise FlowError(f"attribute {name}={value!r} is not a boolean")

    def get_ints(self, name, default=None):
        """A list of ints written as "[1,0,2]", "1,0,2" or "1x0x2"; an empty dim reads as -1."""
        return self._list(name, default, lambda part: int(part) if part.strip() else -1,
                          "integers", dims=True)

    def get_floats(self, name, default=None):
        """A list of numbers written as "[0.5,1,2e-3]" or "0.5,1"; "[]" is the empty list."""
        return self._list(name, default, float, "numbers")

    def _list(self, name, default, parse, what, dims=False):
        """The items of a list attribute, each read with ``parse`` (``dims``: "x" may separate
        them, as in shapes)."""
        value = self.get(name)
        if value is None:
            return default
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        if not text.strip():
            return []
        separator = "x" if dims and "x" in text and "," not in text else ","
        try:
            return [parse(part) for part in text.split(separator)]
        except ValueError:
            raise FlowError(f"attribute {name}={value!r} is not a list of {what}") from None
