"""The snapshot worker: OpenSandbox's SandboxSnapshots, committed by image-committer Jobs."""
