"""BatchSandbox decisions (OpenSandbox), as pure functions."""
