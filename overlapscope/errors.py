"""Errors shown to the user as one line naming the file or flag and the fix."""


class UserError(Exception):
    """A problem with the user's input; its message is printed as one line, no traceback."""
