{{/* Names, labels and the image reference shared by every template. */}}

{{- define "paralleljob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the chart name unless the release name already contains it. */}}
{{- define "paralleljob.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "paralleljob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "paralleljob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: paralleljob
{{- end -}}

{{- define "paralleljob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "paralleljob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "paralleljob.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "paralleljob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "paralleljob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "paralleljob.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "paralleljob.agentServiceAccountName" -}}
{{- printf "%s-agent" (include "paralleljob.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The web view's Deployment, Service, ServiceAccount and ClusterRole (webview.yaml, NOTES.txt). */}}
{{- define "paralleljob.webName" -}}
{{- printf "%s-web" (include "paralleljob.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "paralleljob.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "paralleljob.agentImage" -}}
{{- $repository := default .Values.image.repository .Values.agent.image.repository -}}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.agent.image.tag -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{/* The file --topology-config reads (paralleljob.k8s.edge.config.load_topology_file). */}}
{{- define "paralleljob.topologyFile" -}}
topology:
  nodeBandwidthGbps: {{ .Values.topology.nodeBandwidthGbps }}
  clusterBandwidthGbps: {{ .Values.topology.clusterBandwidthGbps }}
  defaultGpuMemoryGiB: {{ .Values.topology.defaultGpuMemoryGiB }}
  toleratedTaints: {{ .Values.topology.toleratedTaints | toJson }}
  maxGpusPerNode: {{ .Values.topology.maxGpusPerNode | default 16 }}
  pcieRootBandwidthGbps: {{ .Values.topology.pcieRootBandwidthGbps | default 0 }}
  nvlinkSparesPerClique: {{ .Values.topology.nvlinkSparesPerClique | default 0 }}
  levels:
  {{- range .Values.topology.levels }}
    - name: {{ .name | quote }}
      labels: {{ .labels | toJson }}
      bandwidthGbps: {{ .bandwidthGbps }}
      {{- if hasKey . "nvlinkDomain" }}
      nvlinkDomain: {{ .nvlinkDomain }}
      {{- end }}
  {{- end }}
{{- end -}}

{{/* RBAC rules for what the operator does to the jobs it manages and their workers: cluster-wide, or only in
     operator.namespaces when it watches just those (rbac.yaml). */}}
{{- define "paralleljob.workloadRules" -}}
# Create the gang, delete stale or failed workers, re-read one pod after a refused bind, and annotate a
# preemption victim's pods with the checkpoint-now signal (paralleljob.dev/checkpoint-requested).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "create", "delete", "patch"]
# The gang is bound by the operator itself (schedulerName: paralleljob-scheduler).
- apiGroups: [""]
  resources: ["pods/binding"]
  verbs: ["create"]
# One headless Service per job (MASTER_ADDR), and an elastic job's <job>-rdzv Service (its rendezvous host),
# replaced whenever the host moves; both owned by the job, so nothing else is needed.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create", "update"]
# An elastic job's replicas ConfigMap (<job>-replicas), owned by the job: replaced on every resize.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "update"]
# Events about ParallelJobs (in their namespace).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# `create`: the adopting ParallelJob of a pod group (docs/pod-groups.md).
- apiGroups: ["paralleljob.dev"]
  resources: ["paralleljobs"]
  verbs: ["get", "list", "watch", "create"]
# Placement, phase, conditions, restarts: the operator writes only the status subresource.
- apiGroups: ["paralleljob.dev"]
  resources: ["paralleljobs/status"]
  verbs: ["patch"]
# A Kubernetes PodGroup we place says so in its status (PodGroupScheduled), as kube-scheduler's would; so
# does a CompositePodGroup placed as one gang (CompositePodGroupInitiallyScheduled).
- apiGroups: ["scheduling.k8s.io"]
  resources: ["podgroups/status", "compositepodgroups/status"]
  verbs: ["patch"]
# NVLink across the trays of a GB200/GB300 clique (docs/nvl72.md): one ComputeDomain per clique a job's
# trays use, owned by the job (the garbage collector deletes it, and the driver its claim template, with it);
# `delete`: the one of a clique the job's placement left, once none of its pods is there.
- apiGroups: ["resource.nvidia.com"]
  resources: ["computedomains"]
  verbs: ["create", "delete"]
{{- if .Values.dra.driver }}
# DRA (docs/dra.md): one ResourceClaim per worker on a DRA node, read back, replaced when allocated to
# other devices, deleted when its pod is gone; its status carries the allocation and reservation.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["get", "create", "delete"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims/status"]
  verbs: ["patch"]
{{- end }}
{{- end }}
