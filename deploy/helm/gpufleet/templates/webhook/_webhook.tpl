{{/*
The admission webhook's names and switches (docs/admission-webhook.md).
*/}}

{{/* The webhook's Service, and the name of its Issuer, Certificate and registration. */}}
{{- define "gpufleet.webhook.name" -}}
{{- include "gpufleet.fullname" . | trunc 55 | trimSuffix "-" }}-webhook
{{- end -}}

{{/* "true" when cert-manager makes the serving certificate: asked for, and the cluster serves cert-manager.io/v1. */}}
{{- define "gpufleet.webhook.certManager" -}}
{{- if and .Values.webhook.tls.certManager (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}true{{- end -}}
{{- end -}}

{{/* The names the serving certificate is valid for: the Service as the API server calls it. */}}
{{- define "gpufleet.webhook.dnsNames" -}}
{{- $svc := include "gpufleet.webhook.name" . -}}
{{- $ns := .Release.Namespace -}}
{{- toJson (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}

{{/*
matchConditions: only workloads that request an nvidia.com/ resource (GPUs, shared GPUs, MIG slices)
reach the webhook; `spec` is the pod spec as CEL reaches it (object.spec, or a Job's template's).
*/}}
{{- define "gpufleet.webhook.gpuCondition" -}}
{{- $spec := . -}}
{{- $c := "has(c.resources) && ((has(c.resources.requests) && c.resources.requests.exists(r, r.startsWith('nvidia.com/'))) || (has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith('nvidia.com/'))))" -}}
{{- printf "%s.containers.exists(c, %s) || (has(%s.initContainers) && %s.initContainers.exists(c, %s))" $spec $c $spec $spec $c -}}
{{- end -}}
