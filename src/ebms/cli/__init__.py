"""The ``ebms`` command line: configs (TOML → dataclasses), name tables, jobs."""

from ebms.cli.config import Config, ConfigError, load_config
from ebms.cli.main import main

__all__ = ["Config", "ConfigError", "load_config", "main"]
