"""OpenSandbox Pool decisions, as pure functions."""
