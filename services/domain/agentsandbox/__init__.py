"""agent-sandbox rules shared by the sandbox, pool and claim controllers."""
