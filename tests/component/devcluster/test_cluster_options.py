"""DevCluster's start-up options: which CRDs it serves, and which address it gives clients.

- sandbus's CRDs come from the API types, not from files, so an installed wheel (which has no
  ``deploy/crds``) serves them too; ``crd_dirs`` alone replaces them, ``sandbus_crds=True``
  keeps them beside extra ones.
- ``advertise_host`` / ``advertise_url`` name the server in the kubeconfig when the listen
  address is useless to clients (``0.0.0.0`` in a container); the cluster's own controllers
  keep using a local address.
- ``--job-delay`` reaches the simulated kubelet only when given, so its default stays its own;
  so does ``--no-task-executors``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp
import pytest
import yaml

from api.crd import crd_for
from api.kinds import ALL_KINDS
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.cluster.controllers.kubelet.config import KubeletConfig
from devtools.cluster.controllers.lifecycle import CRD_STORAGE
from services.cli.devcluster import register, simulation_settings
from tests.component.devcluster.kubelets import FAST, pod_body
from tests.component.devcluster.rest import watch_until


async def served_plurals(http: aiohttp.ClientSession, group: str, version: str) -> set[str]:
    async with http.get(f"/apis/{group}/{version}") as response:
        if response.status == 404:
            return set()
        assert response.status == 200
        return {r["name"] for r in (await response.json())["resources"]}


async def test_a_default_cluster_serves_every_sandbus_kind_generated_from_its_type() -> None:
    async with (
        DevCluster(port=0, latency=LatencyModel.zero(), controllers=[]) as cluster,
        aiohttp.ClientSession(base_url=cluster.url) as http,
    ):
        for kind in ALL_KINDS:
            info = kind.KIND
            assert info.plural in await served_plurals(http, info.group, info.version)
            stored = cluster.store.get(CRD_STORAGE, "", info.crd_name)
            assert stored is not None
            generated = crd_for(kind)["spec"]
            assert stored["spec"]["versions"] == generated["versions"]
            assert stored["spec"]["names"] == generated["names"]


async def test_crd_dirs_replace_sandbus_crds_unless_they_are_kept(crd_dir: Path) -> None:
    sandbox = ALL_KINDS[0].KIND
    for keep in (None, True):
        async with (
            DevCluster(
                port=0,
                crd_dirs=[crd_dir],
                sandbus_crds=keep,
                latency=LatencyModel.zero(),
                controllers=[],
            ) as cluster,
            aiohttp.ClientSession(base_url=cluster.url) as http,
        ):
            assert await served_plurals(http, "example.com", "v1") == {
                "widgets",
                "widgets/scale",
                "widgets/status",
            }
            served = await served_plurals(http, sandbox.group, sandbox.version)
            assert (sandbox.plural in served) is bool(keep)


async def test_the_kubeconfig_names_the_advertised_host_and_controllers_still_connect(
    tmp_path: Path,
) -> None:
    """Listening on 0.0.0.0 and advertising a name only other containers resolve: the
    kubeconfig carries that name, and the kubelet (which connects locally) still runs pods."""
    settings = SimulationSettings(nodes=1, garbage_collector=False, options={"kubelet": FAST})
    async with DevCluster(
        host="0.0.0.0",
        port=0,
        advertise_host="devcluster.invalid",
        crd_dirs=None,
        latency=LatencyModel.zero(),
        simulation=settings,
    ) as cluster:
        assert cluster.url == f"http://devcluster.invalid:{cluster.port}"
        kubeconfig = yaml.safe_load(cluster.write_kubeconfig(tmp_path / "kubeconfig").read_text())
        assert kubeconfig["clusters"][0]["cluster"]["server"] == cluster.url
        assert cluster.local_url == f"http://127.0.0.1:{cluster.port}"
        async with aiohttp.ClientSession(base_url=cluster.local_url) as http:
            async with http.post("/api/v1/namespaces/default/pods", json=pod_body("p1")) as r:
                assert r.status == 201
            seen = await watch_until(
                http,
                "/api/v1/namespaces/default/pods",
                "p1",
                lambda pod: (pod or {}).get("status", {}).get("phase") == "Running",
            )
        assert seen[-1] is not None


def test_an_advertised_url_is_used_as_given() -> None:
    cluster = DevCluster(port=0, advertise_url="https://cluster.example:16443", crd_dirs=None)
    assert cluster.url == "https://cluster.example:16443"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["devcluster", "--kubeconfig", "k", *argv])


def test_the_command_line_defaults_keep_sandbus_crds_and_add_extra_ones() -> None:
    args = parse("--crds", "extra")
    assert (args.crds, args.sandbus_crds, args.advertise_host) == ([Path("extra")], True, None)
    assert parse("--no-sandbus-crds").sandbus_crds is False
    assert parse("--advertise-url", "http://devcluster:6443").advertise_url == (
        "http://devcluster:6443"
    )


def test_the_job_delay_reaches_the_kubelet_only_when_given() -> None:
    settings = simulation_settings(parse("--job-delay", "2.5", "--nodes", "3"))
    assert (settings.nodes, settings.options) == (3, {"kubelet": {"job_delay": 2.5}})
    # As the kubelet's entry point reads it: a dict of KubeletConfig fields.
    assert KubeletConfig(**settings.options["kubelet"]).job_delay == 2.5
    assert simulation_settings(parse()).options == {}  # the kubelet's default stays in force


def test_no_task_executors_turns_the_real_executors_off() -> None:
    settings = simulation_settings(parse("--no-task-executors"))
    assert settings.options == {"kubelet": {"task_executor_command": None}}
    assert KubeletConfig(**settings.options["kubelet"]).task_executor_command is None
    assert KubeletConfig().task_executor_command is not None  # on unless turned off


@pytest.mark.parametrize(
    "argv",
    [
        ("--advertise-url", "devcluster:6443"),
        ("--advertise-url", "ftp://devcluster"),
        ("--advertise-host", "a", "--advertise-url", "http://b:1"),
    ],
)
def test_a_bad_or_doubled_advertised_address_is_a_usage_error(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(*argv)
    assert caught.value.code == 2
    assert "advertise" in capsys.readouterr().err
