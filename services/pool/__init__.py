"""The pool worker: agent-sandbox's SandboxWarmPool controller, driven by the bus."""
