"""`gpu-stack/template-digest`: the digest of a driver DaemonSet's pod template the node agent upgrades nodes to. It is
on the DaemonSet's metadata (never on its template, so adding it restarted no driver pod), the node-pools document
names the same value for every driver DaemonSet, and it changes exactly when the template does."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json

import pulumi
import pytest
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    EnvVarArgs,
    HostPathVolumeSourceArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    VolumeArgs,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from changesafety import driver_version_bump
from components.kit.digest import UndigestableInput, canonical_json, plain, template_digest
from gpustack.render import integral
from stacktest import STACKS, objects, render, render_stack, stack_config

ANNOTATION = "gpu-stack/template-digest"


def drivers(recording) -> dict[str, dict]:
    return {name: ds for name, ds in objects(recording, "DaemonSet").items() if name.startswith("nvidia-driver-daemonset")}


def document(recording) -> dict:
    return json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])


def template(image: str = "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04", *, env=(), init=(), volumes=()) -> PodTemplateSpecArgs:
    return PodTemplateSpecArgs(
        metadata=ObjectMetaArgs(labels={"app": "nvidia-driver-daemonset"}),
        spec=PodSpecArgs(
            init_containers=list(init) or None,
            containers=[ContainerArgs(name="nvidia-driver-ctr", image=image, env=list(env) or None)],
            volumes=list(volumes) or None,
        ),
    )


def test_every_template_field_changes_the_digest_and_nothing_else_does():
    base = template(env=[EnvVarArgs(name="KERNEL_MODULE_TYPE", value="auto")])
    variants = {
        "image": template("nvcr.io/nvidia/driver:595.91.08-ubuntu22.04", env=[EnvVarArgs(name="KERNEL_MODULE_TYPE", value="auto")]),
        "env": template(env=[EnvVarArgs(name="KERNEL_MODULE_TYPE", value="open")]),
        "init container": template(
            env=[EnvVarArgs(name="KERNEL_MODULE_TYPE", value="auto")],
            init=[ContainerArgs(name="k8s-driver-manager", image="nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0")],
        ),
        "volume": template(
            env=[EnvVarArgs(name="KERNEL_MODULE_TYPE", value="auto")],
            volumes=[VolumeArgs(name="host-root", host_path=HostPathVolumeSourceArgs(path="/"))],
        ),
    }
    digests = {what: template_digest(t) for what, t in variants.items()}
    assert template_digest(base) not in digests.values() and len(set(digests.values())) == len(digests)
    # The same template built again is the same digest: nothing in it depends on object identity or dict order.
    assert template_digest(template(env=[EnvVarArgs(name="KERNEL_MODULE_TYPE", value="auto")])) == template_digest(base)
    assert len(template_digest(base)) == 16 and int(template_digest(base), 16) >= 0


def test_plain_json_names_fields_as_kubernetes_does_and_drops_unset_ones():
    value = plain(template(env=[EnvVarArgs(name="A", value="1")], init=[ContainerArgs(name="i", image="x:1")]))
    spec = value["spec"]
    assert set(spec) == {"initContainers", "containers"}
    assert spec["containers"] == [{"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04", "env": [{"name": "A", "value": "1"}]}]
    assert canonical_json({"b": 1, "a": [True, None, 2.0]}) == '{"a":[true,null,2],"b":1}'


def test_a_value_not_known_yet_is_refused_not_skipped():
    async def with_an_output() -> None:
        # An Output needs the event loop a program runs in.
        with pytest.raises(UndigestableInput, match=r"template\.spec\.containers\[0\]\.image is a pulumi Output"):
            template_digest({"spec": {"containers": [{"image": pulumi.Output.from_input("x:1")}]}})

    asyncio.run(with_an_output())
    with pytest.raises(UndigestableInput, match="has no JSON form"):
        template_digest({"spec": {"thing": object()}})
    with pytest.raises(UndigestableInput, match="not a string"):
        template_digest({1: "x"})


@pytest.mark.parametrize("stack", [s for s in ("prod-managed", "prod-precompiled", "hybrid", "a100-mig") if s in STACKS])
def test_the_annotation_is_the_digest_of_the_template_as_rendered_and_the_document_names_it(stack):
    recording = render_stack(stack)
    daemonsets = drivers(recording)
    assert daemonsets
    named = {}
    for name, ds in daemonsets.items():
        rendered = integral(ds["spec"]["template"])
        expected = hashlib.sha256(json.dumps(rendered, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()[:16]
        assert ds["metadata"]["annotations"][ANNOTATION] == expected, name
        # On the DaemonSet only: a template annotation would have restarted every driver pod once.
        assert ANNOTATION not in (ds["spec"]["template"]["metadata"].get("annotations") or {})
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
        named[name] = expected
    assert document(recording)["drivers"] == named


def test_a_stack_without_driver_daemonsets_names_none():
    recording = render_stack("onprem-host-driver")
    assert not drivers(recording) and document(recording)["drivers"] == {}


def test_the_digest_moves_with_the_template_and_only_with_it():
    config = stack_config("prod-managed")
    before = {n: ds["metadata"]["annotations"][ANNOTATION] for n, ds in drivers(render(config)).items()}
    assert before == {n: ds["metadata"]["annotations"][ANNOTATION] for n, ds in drivers(render(copy.deepcopy(config))).items()}
    bumped = driver_version_bump(config)
    after = {n: ds["metadata"]["annotations"][ANNOTATION] for n, ds in drivers(render(bumped)).items()}
    moved = {n for n in before if before[n] != after[n]}
    assert moved == set(before)
    # The budget is the agents' business, not the template's: changing it leaves every digest where it was.
    budget = copy.deepcopy(config)
    budget["gpu-stack:upgrade"].update(maxUnavailable="50%", maxParallelUpgrades=3, paused=True)
    assert {n: ds["metadata"]["annotations"][ANNOTATION] for n, ds in drivers(render(budget)).items()} == before
