"""The domain rules of each API family, shared by the controllers that produce and consume them.

Pure functions and constants only (no I/O): what a pool promises a claim about its members,
how a template is hashed, which annotations record an OpenSandbox allocation. A rule that two
controllers must agree on lives here, so that neither controller imports the other.

- :mod:`services.domain.agentsandbox`: agent-sandbox's Sandbox, SandboxTemplate, SandboxClaim
  and SandboxWarmPool.
- :mod:`services.domain.opensandbox`: OpenSandbox's Pool, BatchSandbox and SandboxSnapshot.
"""
