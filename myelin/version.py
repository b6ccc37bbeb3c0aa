"""myelin's version: a leaf module, so that the layers that stamp it on what they write (the
compile caches, saved models, exported libraries) need not import the package itself."""

__version__ = "0.1.0"
