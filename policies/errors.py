"""The policies package's exceptions (the tree is drawn in ``policies/__init__.py``)."""

from __future__ import annotations

from pathlib import Path


class PolicyError(Exception):
    """Base of every error the policies package raises."""


class PolicyLoadError(PolicyError):
    """The policy set could not be built: a file or directory cannot be read, or the
    packaged schema is broken. The node must not start with a partial policy set."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        """The file (or directory) at fault."""
        self.detail = detail
        """What is wrong, in the words of the layer that found it (cedarpy's message)."""
        super().__init__(f"{path}: {detail}")


class PolicyParseError(PolicyLoadError):
    """A policy file is not valid Cedar syntax (cedarpy could not parse it)."""


class PolicyValidationError(PolicyLoadError):
    """A policy file parses but does not validate against ``schema.cedarschema``
    (unknown entity type, action or attribute, type error), or breaks a rule of
    reel's (a policy id used twice, a template that nothing links)."""


class PolicyRequestError(PolicyError, ValueError):
    """A request handed to the engine is malformed; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        """The request field at fault, e.g. ``risk``."""
        self.problem = problem
        """What is wrong with it."""
        super().__init__(f"{field}: {problem}")
