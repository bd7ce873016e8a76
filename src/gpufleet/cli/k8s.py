"""``gpufleet k8s crds|policies|gpu-config``: what gpufleet puts in a Kubernetes cluster, as a YAML stream.

``gpufleet k8s crds | kubectl apply -f -`` installs the ``gpufleet.io`` CRDs; ``gpufleet k8s
policies`` renders the PriorityClasses, team Namespaces, ResourceQuotas and LimitRanges of the
team layout, read from the server (``--url``/``--token``) or from a file (``--teams-file``);
``gpufleet k8s gpu-config`` renders the GPU stack of the GPU pools (device plugin and mig-parted
ConfigMaps, the GPU Operator's ClusterPolicy, Karpenter NodePools; :mod:`gpufleet.k8s.gpustack`).

Light at import (the CLI starts in well under 0.3 s): PyYAML, the SDK and :mod:`gpufleet.k8s` are
imported in the commands' bodies.
"""

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.cli import jobs
from gpufleet.cli.common import handle_errors
from gpufleet.cli.jobs import TokenOpt, UrlOpt
from gpufleet.cli.render import bad_option, note

k8s_app = typer.Typer(
    no_args_is_help=True,
    help="Kubernetes manifests: gpufleet's CRDs and the cluster policies of the teams.",
)


def _emit(objects: list[dict[str, Any]]) -> None:
    """One YAML stream, each object starting with ``---`` (keys in the manifests' own order)."""
    import yaml

    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True, width=120))


@k8s_app.command("crds")
@handle_errors
def crds_command() -> None:
    """Print the CostBudget and CostAttribution CRDs (apply with: gpufleet k8s crds | kubectl apply -f -)."""
    from gpufleet.k8s.crds import crds

    _emit(crds())


def _namespaces(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        team, eq, ns = item.partition("=")
        if not eq or not team.strip() or not ns.strip():
            raise bad_option("--namespace", f"{item!r} is not TEAM=NAMESPACE")
        out[team.strip()] = ns.strip()
    return out


def _read_teams(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise bad_option("--teams-file", f"cannot read {path}: {e.strerror or e}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise bad_option("--teams-file", f"{path} is not YAML or JSON{where}") from None


@k8s_app.command("policies")
@handle_errors
def policies_command(
    teams_file: Annotated[
        Path | None,
        typer.Option(
            "--teams-file",
            metavar="FILE",
            help="teams from a YAML/JSON file (a list of teams as `gpufleet team ls --json` prints, or a "
            "scheduling profile's `teams:`) instead of the server",
            dir_okay=False,
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace", metavar="TEAM=NAMESPACE", help="a team's namespace (repeatable; default: the team's name)"
        ),
    ] = None,
    max_gpus_per_container: Annotated[
        int | None,
        typer.Option(
            "--max-gpus-per-container",
            metavar="N",
            min=1,
            max=1024,
            help="the LimitRange's nvidia.com/gpu max (default: the largest node's GPUs from the server, else 8)",
        ),
    ] = None,
    gpu_model: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu-model",
            metavar="MODEL",
            help="the cluster's GPU models, for '*' quotas (repeatable; default: the server's nodes' models)",
        ),
    ] = None,
    gpu_replicas: Annotated[
        int | None,
        typer.Option(
            "--gpu-replicas",
            metavar="N",
            min=1,
            max=64,
            help="nvidia.com/gpu per GPU on time-sliced / MPS nodes (the largest; default 1: no sharing)",
        ),
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print PriorityClasses, and per team a Namespace, ResourceQuota and LimitRange (a YAML stream)."""
    from gpufleet.k8s.policies import TeamLike, policies, teams_from_document

    models = list(gpu_model) if gpu_model else None
    teams: list[TeamLike]
    if teams_file is not None:
        if url is not None or token is not None:
            raise bad_option("--teams-file", "reads teams from the file: give it or --url/--token, not both")
        teams = list(teams_from_document(_read_teams(teams_file), source=str(teams_file)))
        max_gpus = max_gpus_per_container or 8
    else:
        with jobs.make_client(url, token) as client:
            teams = list(client.teams())
            nodes = client.nodes()
        max_gpus = max_gpus_per_container or max((n.gpu_count for n in nodes), default=0) or 8
        if models is None and nodes:
            models = sorted({n.gpu_model for n in nodes if n.gpu_count > 0})
        if gpu_replicas is None and any(n.sharing == "shared" for n in nodes):
            note(
                "[yellow]warning:[/] some nodes share GPUs (time-slicing / MPS): give --gpu-replicas (the "
                "nvidia.com/gpu each of their GPUs counts as), or quotas and limits count GPUs where pods ask for "
                "replicas and Kubernetes may refuse pods gpufleet admitted"
            )
    _emit(
        policies(
            teams,
            _namespaces(namespace),
            max_gpus_per_container=max_gpus,
            gpu_models=models or None,
            gpu_replicas=gpu_replicas or 1,
        )
    )


class GpuStackPart(StrEnum):
    """Parts of `gpufleet k8s gpu-config` (gpufleet.k8s.gpustack.PARTS)."""

    DEVICE_PLUGIN = "devicePlugin"
    MIG = "mig"
    CLUSTER_POLICY = "clusterPolicy"
    NODE_POOLS = "nodePools"


@k8s_app.command("gpu-config")
@handle_errors
def gpu_config_command(
    pools: Annotated[
        Path | None,
        typer.Option(
            "--pools",
            metavar="FILE",
            help="GPU pools file (default: the packaged gpufleet/data/k8s/gpu-pools.yaml; form: docs/gpu-stack.md)",
            dir_okay=False,
        ),
    ] = None,
    node_class: Annotated[
        str | None,
        typer.Option("--node-class", metavar="NAME", help="the EC2NodeClass (NodeClass) every NodePool uses"),
    ] = None,
    only: Annotated[
        GpuStackPart | None,
        typer.Option("--only", help="print one part: devicePlugin, mig, clusterPolicy or nodePools"),
    ] = None,
    values: Annotated[
        bool,
        typer.Option("--values", help="print the Helm chart's gpuStack values that render the same objects"),
    ] = False,
) -> None:
    """Print the GPU stack of the pools as a YAML stream: the device plugin's and mig-parted's ConfigMaps,
    the GPU Operator's ClusterPolicy and Karpenter NodePools (or, with --values, the chart's gpuStack values)."""
    from gpufleet.config import read_yaml
    from gpufleet.io.catalog import load_catalog
    from gpufleet.k8s import gpustack

    if values and only is not None:
        raise bad_option("--only", "--values prints all of the gpuStack values: give one or the other")
    stack = gpustack.packaged_stack() if pools is None else gpustack.parse_stack(read_yaml(pools), source=str(pools))
    if node_class is not None:
        stack = stack.with_node_class(node_class)
    gpustack.gpufleet_pools(stack, load_catalog())  # the autoscaler's pools: priced, with known shapes
    chart = gpustack.chart_values(stack)
    if values:
        sys.stdout.write(gpustack.dump_values(chart))
        return
    parts = gpustack.parts_of([only.value]) if only is not None else None
    sys.stdout.write(gpustack.dump_objects(gpustack.objects_from_values(chart, only=parts)))
