"""The one error every configuration check raises: `telemq serve` prints its message (which
names the key and the problem) as one line and exits with code 2.

A module of its own so that the checks of every section (tls.py, network.py, config.py)
raise it without importing one another's modules.
"""


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and the problem."""
