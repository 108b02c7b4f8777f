"""Errors shown to the user as one line naming the file or flag and the fix."""


class UserError(Exception):
    """A problem with the user's input; its message is printed as one line, no traceback."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every ``finally`` (stopping workers, keeping
    what was written) runs before the command exits with 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
