"""Code generation back ends."""
