"""Shared test set-up: this folder is on sys.path, so tests in sub-folders import ``jitcheck``
and ``randomgraphs``."""
