"""The one error the command shows as a line of its own."""


class CommandError(Exception):
    """An error shown to the user as one line (exit status 2)."""
