#!/usr/bin/env bash
# Give nodes fake NVIDIA GPUs, the way the operator sees real ones: nvidia.com/gpu capacity and allocatable
# in the node status, GPU Feature Discovery labels (product, memory in MiB, count) and topology labels
# (nodes grouped into racks under one spine), so ParallelJobs can be placed on a kind cluster.
#
# Only kubectl is used (>= 1.24 for `patch --subresource=status`); it talks to the current context unless
# --context or $KUBECONFIG says otherwise. Re-running is safe: every write overwrites the same values.
# Nothing runs on these GPUs: pods bound to them start (kind) but see no device.
set -euo pipefail

usage() {
  cat <<USAGE
usage: $0 [--nodes "NODE..."] [--selector SELECTOR] [--gpus N] [--product NAME] [--memory-mib MIB]
          [--nodes-per-rack N] [--context CONTEXT]

  --nodes            these nodes (space or comma separated); default: every node matching --selector
  --selector         label selector of the nodes to change (default: paralleljob.dev/fake-gpus=true, the
                     label deploy/kind/cluster.yaml puts on kind's workers)
  --gpus             GPUs per node (default: 8)
  --product          nvidia.com/gpu.product (default: NVIDIA-H100-80GB-HBM3)
  --memory-mib       nvidia.com/gpu.memory, MiB per GPU (default: 81559)
  --nodes-per-rack   nodes under one leaf switch (default: 2)
  --context          kubectl context to use
USAGE
}

nodes="" selector="paralleljob.dev/fake-gpus=true" gpus=8 product="NVIDIA-H100-80GB-HBM3" memory_mib=81559
per_rack=2 kubectl=(kubectl)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) nodes="${2//,/ }"; shift 2 ;;
    --selector) selector="$2"; shift 2 ;;
    --gpus) gpus="$2"; shift 2 ;;
    --product) product="$2"; shift 2 ;;
    --memory-mib) memory_mib="$2"; shift 2 ;;
    --nodes-per-rack) per_rack="$2"; shift 2 ;;
    --context) kubectl+=(--context "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for number in "$gpus" "$memory_mib" "$per_rack"; do
  [[ "$number" =~ ^[1-9][0-9]*$ ]] || { echo "not a positive integer: $number" >&2; exit 2; }
done

if [[ -z "$nodes" ]]; then
  nodes="$("${kubectl[@]}" get nodes --selector "$selector" -o jsonpath='{.items[*].metadata.name}')"
fi
# Sorted, so a node keeps its rack when the script runs again.
read -r -a names <<<"$(tr ' ' '\n' <<<"$nodes" | sed '/^$/d' | sort | tr '\n' ' ')"
if [[ ${#names[@]} -eq 0 ]]; then
  echo "no nodes to change (selector: $selector)" >&2
  exit 1
fi

index=0
for node in "${names[@]}"; do
  rack=$((index / per_rack))
  "${kubectl[@]}" label node "$node" --overwrite \
    nvidia.com/gpu.present=true \
    "nvidia.com/gpu.product=$product" \
    "nvidia.com/gpu.memory=$memory_mib" \
    "nvidia.com/gpu.count=$gpus" \
    "network.topology.nvidia.com/leaf=leaf-$rack" \
    network.topology.nvidia.com/spine=spine-0 \
    topology.kubernetes.io/zone=zone-a >/dev/null
  # Capacity lives in the status subresource; the kubelet keeps extended resources it does not manage.
  patch="{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"$gpus\"},\"allocatable\":{\"nvidia.com/gpu\":\"$gpus\"}}}"
  "${kubectl[@]}" patch node "$node" --subresource=status --type=merge -p "$patch" >/dev/null
  echo "$node: $gpus x $product in leaf-$rack"
  index=$((index + 1))
done
