{{/* The alerting rules as Prometheus rule groups: the PrometheusRule's spec, and what the e2e test hands to
  promtool and to a real Prometheus. Thresholds come from .Values.alerts (docs/dashboard.md). */}}
{{- define "paralleljob.alertGroups" -}}
{{- $a := .Values.alerts -}}
groups:
  - name: paralleljob-operator
    rules:
      - alert: ParallelJobOperatorNotLeading
        expr: max(paralleljob_leader) < 1 or absent(paralleljob_leader)
        for: {{ $a.notLeadingFor }}
        labels:
          severity: critical
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: No ParallelJob operator holds the leader lease
          description: No instance has reported paralleljob_leader=1 for {{ $a.notLeadingFor }}; gangs are neither placed nor repaired.
      - alert: ParallelJobOperatorUnhealthy
        expr: min by (instance) (paralleljob_healthy) < 1
        for: {{ $a.unhealthyFor }}
        labels:
          severity: critical
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: ParallelJob operator {{ "{{ $labels.instance }}" }} fails /healthz
          description: Its reconcile loop is stuck, a task died or its pod watch is cut off (the liveness probe restarts it).
      - alert: ParallelJobPassesSlow
        expr: histogram_quantile(0.99, sum by (le) (rate(paralleljob_reconcile_pass_duration_seconds_bucket[5m]))) > {{ $a.slowPassSeconds }}
        for: {{ $a.slowPassFor }}
        labels:
          severity: warning
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: ParallelJob reconcile passes are slow
          description: The p99 pass takes {{ "{{ $value | humanizeDuration }}" }} (threshold {{ $a.slowPassSeconds }} s); placements and repairs wait that long.
  - name: paralleljob-jobs
    rules:
      - alert: ParallelJobGangsWaiting
        expr: sum by (queue) (paralleljob_queue_length) > 0
        for: {{ $a.gangsWaitingFor }}
        labels:
          severity: warning
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: Gangs have waited in queue {{ "{{ $labels.queue }}" }} for over {{ $a.gangsWaitingFor }}
          description: '{{ "{{ $value }}" }} job(s) cannot be placed; `kubectl get pj` and the web view show why.'
      - alert: ParallelJobGPUsFailing
        expr: sum(increase(paralleljob_failures_total[1h])) > {{ $a.gpuFailuresPerHour }}
        labels:
          severity: warning
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: GPUs or nodes are failing faster than {{ $a.gpuFailuresPerHour }} an hour
          description: The operator handled {{ "{{ $value }}" }} failures in the last hour.
      - alert: ParallelJobRepairsFailing
        expr: sum(increase(paralleljob_failures_total{action="failed"}[1h])) > 0
        labels:
          severity: critical
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: ParallelJob repairs are failing
          description: '{{ "{{ $value }}" }} failure(s) in the last hour ended a job instead of repairing it (failurePolicy, no room, retries exhausted).'
  - name: paralleljob-agent
    rules:
      - alert: ParallelJobAgentXidStorm
        expr: sum by (instance) (increase(paralleljob_agent_xid_total[1h])) > {{ $a.xidsPerNodePerHour }}
        labels:
          severity: warning
          {{- with $a.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: Node {{ "{{ $labels.instance }}" }} reports many XID errors
          description: '{{ "{{ $value }}" }} XIDs in the last hour (threshold {{ $a.xidsPerNodePerHour }}).'
{{- end -}}
