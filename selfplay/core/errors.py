"""User-facing errors: the CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input from the user (config, model spec, game id, file): one clear line, no traceback."""
