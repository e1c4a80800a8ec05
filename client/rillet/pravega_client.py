"""The Pravega facade's first name, which docs and code written before ``rillet.pravega`` import."""

from rillet.pravega import *
from rillet.pravega import __all__  # noqa: F401
