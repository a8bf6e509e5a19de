"""OpenSandbox rules shared by the pool, claim (BatchSandbox) and snapshot controllers."""
