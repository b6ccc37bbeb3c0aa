"""Where ``OnnxModel.run`` puts its outputs: :mod:`myelin.importers.outputs`, which every
importer's compiled models share."""

from myelin.importers.outputs import deliver, targets  # noqa: F401
