"""The CLI's one error type (its own module, so that `python -m broker.cli.main` and the
installed `broker` script catch the same class)."""


class CliError(Exception):
    """One line for the user; exit code 1 (runtime) or 2 (usage/config)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code
