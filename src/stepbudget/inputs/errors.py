"""The one error type of bad input, below every module that reads input."""


class ScenarioError(ValueError):
    """Bad input: the message is one line naming the field and the fix."""


def prefixed(prefix: str, e: Exception) -> ScenarioError:
    """``e``'s problems, one line each, every line behind ``prefix`` (a sweep axis, a variant): the caller raises it."""
    return ScenarioError("\n".join(f"{prefix}{line}" for line in str(e).splitlines() or [""]))
