"""components/kit/digest.py: the digest of a pod template as rendered, which changes exactly when the template does."""

from __future__ import annotations

import asyncio

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

from components.kit.digest import UndigestableInput, canonical_json, plain, template_digest


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
