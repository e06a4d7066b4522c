"""The one error type of bad input, below every module that reads input."""


class ScenarioError(ValueError):
    """Bad input: the message is one line naming the field and the fix."""


def prefixed(prefix: str, e: Exception) -> ScenarioError:
    """``e``'s problems, one line each, every line behind ``prefix`` (a sweep axis, a variant): the caller raises it."""
    return ScenarioError("\n".join(f"{prefix}{line}" for line in str(e).splitlines() or [""]))


class OptionError(ScenarioError):
    """Bad value of a command's option: ``option`` is the library's name for it (the API's keyword, such as
    ``"gpus"`` or ``"servers x gpus_per_server"``), so the CLI names its flag and the web app its control from the
    name, never from the message's words."""

    def __init__(self, option: str, problem: str, sep: str = ": "):
        super().__init__("\n".join(f"{option}{sep}{line}" for line in problem.splitlines() or [problem]))
        self.option, self.problem, self.sep = option, problem, sep
        """``problem`` has a line per problem; each line of the message is ``option``, ``sep``, the line."""
