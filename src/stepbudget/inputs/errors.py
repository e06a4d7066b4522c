"""The one error type of bad input, below every module that reads input."""


class ScenarioError(ValueError):
    """Bad input: the message is one line naming the field and the fix."""
