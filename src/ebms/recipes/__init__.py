"""Packaged recipes (TOML configs): ``ebms recipes`` lists them."""
