"""The ownership tests' shared world (`ownership_fixtures.world`), built once per test module that
asks for it; a module that defines its own `world` keeps its own."""

from ownership_fixtures import world  # noqa: F401  (a fixture, found by name)
