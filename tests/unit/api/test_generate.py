"""``sandbus generate crds``: writes the CRDs, and ``--check`` tells stale files apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.crd import render_crds
from services.cli import main


def test_generate_crds_writes_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "crds"

    assert main(["generate", "crds", "--out", str(out)]) == 0

    assert {path.name: path.read_text() for path in out.iterdir()} == render_crds()
    assert len(capsys.readouterr().out.splitlines()) == 7


def test_check_passes_on_current_files(tmp_path: Path) -> None:
    main(["generate", "crds", "--out", str(tmp_path)])

    assert main(["generate", "crds", "--out", str(tmp_path), "--check"]) == 0


def test_check_fails_on_a_stale_or_missing_file_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["generate", "crds", "--out", str(tmp_path)])
    stale = tmp_path / "agents.x-k8s.io_sandboxes.yaml"
    stale.write_text("# edited by hand\n")
    (tmp_path / "sandbox.opensandbox.io_pools.yaml").unlink()

    assert main(["generate", "crds", "--out", str(tmp_path), "--check"]) == 1

    assert stale.read_text() == "# edited by hand\n"
    err = capsys.readouterr().err
    assert "agents.x-k8s.io_sandboxes.yaml" in err
    assert "sandbox.opensandbox.io_pools.yaml" in err


def test_the_default_output_is_deploy_crds() -> None:
    from services.cli.generate import TARGETS

    assert TARGETS["crds"].default_out == "deploy/crds"
