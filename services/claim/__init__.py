"""The claim worker: agent-sandbox's SandboxClaim controller, driven by the bus."""
