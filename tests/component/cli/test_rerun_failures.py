"""``sandbus explain --rerun`` when it cannot re-run: nothing recorded, a worker this version
does not know, a decision recorded before decisions kept their inputs."""

from __future__ import annotations

from nats.js import JetStreamContext

from tests.component.cli.commands import publish_all, run_command
from tests.unit.cli.histories import decision, ref


async def test_an_object_without_decisions_is_an_error(js: JetStreamContext, nats_url: str) -> None:
    result = await run_command(["explain", "Sandbox/default/nobody", "--rerun"], nats_url)
    assert result.code == 1
    assert "no decision about Sandbox/default/nobody" in result.err


async def test_old_decisions_and_unknown_workers_are_said_not_rerun(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(
        js,
        [
            decision("sandbox", ref("Sandbox", "old"), 1, reason="before inputs were kept"),
            decision("retired", ref("Sandbox", "old"), 2, reason="a worker since removed"),
        ],
    )
    result = await run_command(["explain", "Sandbox/default/old", "--rerun"], nats_url)
    assert result.code == 3, "nothing was shown to decide the same"
    assert "cannot re-run: recorded before decisions kept their inputs" in result.out
    assert "unknown worker 'retired'" in result.err
