"""Every Kubernetes name gpufleet reads or writes, once: labels, annotations, taints, extended
resources, API groups and versions. Data only (rank 0 in ``tests/project/test_layering.py``): any
layer may name these; none defines its own (``tests/project/test_vocabulary.py`` finds a qualified
name written anywhere else).

Grouped by whose names they are. A node's GPU sharing as gpufleet reads it is not a label but
:class:`gpufleet.model.node.GpuSharingFacts`.
"""

from __future__ import annotations

from typing import Final

# -- gpufleet's own: the API group of its CRDs, its labels, annotations and taints ---------------------

GPUFLEET_GROUP: Final = "gpufleet.io"
GPUFLEET_VERSION: Final = "v1alpha1"
GPUFLEET_API: Final = f"{GPUFLEET_GROUP}/{GPUFLEET_VERSION}"  # the CostBudget / CostAttribution CRs
GPUFLEET_PREFIX: Final = f"{GPUFLEET_GROUP}/"  # every gpufleet label and annotation starts so
SCHEDULER_NAME: Final = "gpufleet"  # spec.schedulerName of the pods gpufleet places
MANAGER: Final = "gpufleet"  # the app.kubernetes.io/managed-by (and name, part-of) of what gpufleet writes
PRIORITY_CLASS_PREFIX: Final = "gpufleet-"  # gpufleet's PriorityClasses: gpufleet-<class>

# On gpufleet's Jobs and their pods, as a label (a label value) and an annotation (as it is): the job
# and its run (attempt).
KEY_JOB_ID: Final = "gpufleet.io/job-id"
KEY_RUN: Final = "gpufleet.io/run"
# Pod (or Job) annotations a workload carries: its own budget in dollars, its gang size, where its
# checkpoints go, its expected runtime (the webhook prices it).
ANNOTATION_COST_LIMIT: Final = "gpufleet.io/cost-limit"
ANNOTATION_GANG_SIZE: Final = "gpufleet.io/gang-size"
ANNOTATION_CHECKPOINT_DIR: Final = "gpufleet.io/checkpoint-dir"
ANNOTATION_ESTIMATED_RUNTIME: Final = "gpufleet.io/estimated-runtime"
# a run's pods carry its Job's activeDeadlineSeconds: a new leader recovering the run from its pods knows it
ANNOTATION_MAX_RUNTIME: Final = "gpufleet.io/max-runtime-s"
# An adopted job (its pods made by someone else): the owner object's kind/namespace/name.
LABEL_ADOPTED_OWNER: Final = "gpufleet.io/adopted-owner"
# ... whose pods each ask for this many replicas of a time-sliced GPU (set on adoption).
LABEL_REQUESTED_REPLICAS: Final = "gpufleet.io/requested-gpu-replicas"
# Node labels and annotations an operator (or gpufleet's NodeClaims) sets: the node's price per hour,
# its capacity type, its gpufleet pool, "true" on nodes gpufleet provisioned.
ANNOTATION_HOURLY_PRICE: Final = "gpufleet.io/hourly-price-usd"
LABEL_CAPACITY_TYPE: Final = "gpufleet.io/capacity-type"
LABEL_POOL: Final = "gpufleet.io/pool"
LABEL_PROVISIONED: Final = "gpufleet.io/provisioned"
LABEL_PROVIDER_ID: Final = "gpufleet.io/provider-id"  # OpenCost's provider_id of a node
TAINT_DEDICATED: Final = "gpufleet.io/dedicated"  # an operator's taint reserving nodes for gpufleet
# The server's own host as a node: "local", where its GPU list came from, mixed models, GPU memory.
LABEL_BACKEND: Final = "gpufleet.io/backend"
LABEL_GPU_SOURCE: Final = "gpufleet.io/gpu-source"
LABEL_GPU_MODELS: Final = "gpufleet.io/gpu-models"
LABEL_GPU_MEMORY_GIB: Final = "gpufleet.io/gpu-memory-gib"
# Team namespaces and quotas (`gpufleet k8s policies`), and the CRDs' own description.
LABEL_TEAM: Final = "gpufleet.io/team"
ANNOTATION_NOMINAL_GPUS: Final = "gpufleet.io/nominal-gpus"
ANNOTATION_NOTE: Final = "gpufleet.io/note"
ANNOTATION_DESCRIPTION: Final = "gpufleet.io/description"
# In an OpenCost-style ledger by pod: the job of each segment.
LABEL_JOB: Final = "gpufleet.io/job"

# -- NVIDIA: the device plugin's resources, GPU Feature Discovery's labels, the GPU Operator ----------

NVIDIA_PREFIX: Final = "nvidia.com/"
GPU_RESOURCE: Final = "nvidia.com/gpu"  # also the taint clouds put on GPU nodes
SHARED_GPU_RESOURCE: Final = "nvidia.com/gpu.shared"  # time-slicing / MPS with renameByDefault
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"  # + <profile>: a MIG slice (mixed strategy)
LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY: Final = "nvidia.com/gpu.memory"  # MiB
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
LABEL_GPU_REPLICAS: Final = "nvidia.com/gpu.replicas"
LABEL_SHARING_STRATEGY: Final = "nvidia.com/gpu.sharing-strategy"  # time-slicing | mps
LABEL_MIG_STRATEGY: Final = "nvidia.com/mig.strategy"  # none | single | mixed
LABEL_DEVICE_PLUGIN_CONFIG: Final = "nvidia.com/device-plugin.config"  # the device-plugin config a node uses
LABEL_MIG_CONFIG: Final = "nvidia.com/mig.config"  # the mig-parted config a node uses
CLUSTER_POLICY_API: Final = "nvidia.com/v1"

# -- Karpenter: its API, the labels and taints it sets, its providers' NodeClass groups and keys ------

KARPENTER_GROUP: Final = "karpenter.sh"
KARPENTER_VERSION: Final = "v1"
KARPENTER_API: Final = f"{KARPENTER_GROUP}/{KARPENTER_VERSION}"
LABEL_KARPENTER_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
LABEL_KARPENTER_NODEPOOL: Final = "karpenter.sh/nodepool"
TAINT_KARPENTER_DISRUPTED: Final = "karpenter.sh/disrupted"
TAINT_KARPENTER_DISRUPTION: Final = "karpenter.sh/disruption"  # Karpenter < v1
# On a pod: "true" keeps Karpenter's voluntary disruption (consolidation, drift, expiry) off its node
# while it runs; gpufleet's pods carry it (their node is gpufleet's to give back).
ANNOTATION_KARPENTER_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
# On a NodePool (its hash controller writes them) and on each of its NodeClaims: the template's hash
# and the hash scheme's version; a claim whose hash differs from its NodePool's has drifted.
ANNOTATION_KARPENTER_NODEPOOL_HASH: Final = "karpenter.sh/nodepool-hash"
ANNOTATION_KARPENTER_NODEPOOL_HASH_VERSION: Final = "karpenter.sh/nodepool-hash-version"
AWS_NODE_CLASS_GROUP: Final = "karpenter.k8s.aws"
AZURE_NODE_CLASS_GROUP: Final = "karpenter.azure.com"
# the well-known labels of an AWS instance type (NodePool requirement keys)
AWS_FAMILY: Final = "karpenter.k8s.aws/instance-family"
AWS_CATEGORY: Final = "karpenter.k8s.aws/instance-category"
AWS_GENERATION: Final = "karpenter.k8s.aws/instance-generation"
AWS_SIZE: Final = "karpenter.k8s.aws/instance-size"
AWS_CPU: Final = "karpenter.k8s.aws/instance-cpu"
AWS_MEMORY: Final = "karpenter.k8s.aws/instance-memory"  # MiB
AWS_GPU_NAME: Final = "karpenter.k8s.aws/instance-gpu-name"
AWS_GPU_COUNT: Final = "karpenter.k8s.aws/instance-gpu-count"
AWS_GPU_MANUFACTURER: Final = "karpenter.k8s.aws/instance-gpu-manufacturer"
AWS_GPU_MEMORY: Final = "karpenter.k8s.aws/instance-gpu-memory"  # MiB
AZURE_GPU_NAME: Final = "karpenter.azure.com/sku-gpu-name"
AZURE_GPU_COUNT: Final = "karpenter.azure.com/sku-gpu-count"

# -- cloud providers: EKS, GKE and AKS node labels and taints; the AWS node termination handler -------

LABEL_EKS_CAPACITY_TYPE: Final = "eks.amazonaws.com/capacityType"
LABEL_EKS_NODEGROUP: Final = "eks.amazonaws.com/nodegroup"
LABEL_GKE_SPOT: Final = "cloud.google.com/gke-spot"  # also a taint
LABEL_GKE_PREEMPTIBLE: Final = "cloud.google.com/gke-preemptible"  # also a taint
LABEL_GKE_RESERVATION: Final = "cloud.google.com/reservation-name"
LABEL_GKE_NODEPOOL: Final = "cloud.google.com/gke-nodepool"
LABEL_GKE_ACCELERATOR: Final = "cloud.google.com/gke-accelerator"  # nvidia-tesla-a100, nvidia-l4, nvidia-h100-80gb...
LABEL_GKE_ACCELERATOR_COUNT: Final = "cloud.google.com/gke-accelerator-count"  # physical GPUs
LABEL_GKE_GPU_SHARING_STRATEGY: Final = "cloud.google.com/gke-gpu-sharing-strategy"  # time-sharing | mps
LABEL_GKE_MAX_SHARED_CLIENTS: Final = "cloud.google.com/gke-max-shared-clients-per-gpu"  # containers per GPU
LABEL_GKE_GPU_PARTITION_SIZE: Final = "cloud.google.com/gke-gpu-partition-size"  # a MIG profile, e.g. 1g.5gb
TAINT_GKE_TERMINATION: Final = "cloud.google.com/impending-node-termination"
LABEL_AKS_PRIORITY: Final = "kubernetes.azure.com/scalesetpriority"  # also a taint
LABEL_AKS_AGENTPOOL: Final = "kubernetes.azure.com/agentpool"
LABEL_AKS_ACCELERATOR: Final = "kubernetes.azure.com/accelerator"  # "nvidia" on AKS GPU nodes
TAINT_AKS_GPU: Final = "sku"  # sku=gpu:NoSchedule, the taint AKS's GPU guide puts on GPU node pools
LABEL_EKS_ACCELERATOR: Final = "k8s.amazonaws.com/accelerator"  # eksctl / cluster-autoscaler: nvidia-tesla-t4...
TAINT_NTH_SPOT_ITN: Final = "aws-node-termination-handler/spot-itn"
TAINT_NTH_REBALANCE: Final = "aws-node-termination-handler/rebalance-recommendation"
TAINT_NTH_MAINTENANCE: Final = "aws-node-termination-handler/scheduled-maintenance"
TAINT_NTH_ASG_TERMINATION: Final = "aws-node-termination-handler/asg-lifecycle-termination"
TAINT_CA_DELETING: Final = "ToBeDeletedByClusterAutoscaler"  # cluster-autoscaler's

# -- Kubernetes well-known: labels, taints, API versions ------------------------------------------------

LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_INSTANCE_TYPE_BETA: Final = "beta.kubernetes.io/instance-type"  # before Kubernetes 1.17
LABEL_REGION_BETA: Final = "failure-domain.beta.kubernetes.io/region"
LABEL_ZONE_BETA: Final = "failure-domain.beta.kubernetes.io/zone"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_WINDOWS_BUILD: Final = "node.kubernetes.io/windows-build"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_LIFECYCLE: Final = "node.kubernetes.io/lifecycle"  # spot | preemptible on some self-managed groups
LABEL_NODE_TYPE: Final = "type"  # virtual-kubelet nodes say type=virtual-kubelet
TAINT_SHUTDOWN: Final = "node.cloudprovider.kubernetes.io/shutdown"
TAINT_OUT_OF_SERVICE: Final = "node.kubernetes.io/out-of-service"
# The node lifecycle's own taints (not-ready, unreachable, unschedulable, *-pressure, out-of-service;
# the cloud provider's uninitialized, shutdown) and Karpenter's until the node registers: what the node
# is going through, never where a job may run (nodes.py keeps them out of Node.taints)
TAINT_NODE_LIFECYCLE_PREFIX: Final = "node.kubernetes.io/"
TAINT_CLOUD_PROVIDER_PREFIX: Final = "node.cloudprovider.kubernetes.io/"
TAINT_KARPENTER_UNREGISTERED: Final = "karpenter.sh/unregistered"
LABEL_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"  # an Indexed Job's pod (label, annotation)
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
CORE_API: Final = "v1"
BATCH_API: Final = "batch/v1"
POLICY_API: Final = "policy/v1"
SCHEDULING_API: Final = "scheduling.k8s.io/v1"
ADMISSION_API: Final = "admission.k8s.io/v1"
CRD_API: Final = "apiextensions.k8s.io/v1"

# -- Kueue and JobSet: gang sizes and gangs of pods other controllers made --------------------------------

ANNOTATION_KUEUE_GROUP_SIZE: Final = "kueue.x-k8s.io/pod-group-total-count"
LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
LABEL_JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
LABEL_JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
JOBSET_API: Final = "jobset.x-k8s.io/v1alpha2"
