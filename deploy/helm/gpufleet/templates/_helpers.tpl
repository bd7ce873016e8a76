{{/*
Names, labels and the pieces several templates share.
*/}}

{{- define "gpufleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's objects' base name: <release> if it already contains the chart name, else <release>-<chart>. */}}
{{- define "gpufleet.fullname" -}}
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

{{- define "gpufleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpufleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpufleet.labels" -}}
helm.sh/chart: {{ include "gpufleet.chart" . }}
{{ include "gpufleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpufleet
{{- end -}}

{{/* The controller's selector: the chart's labels plus its component. */}}
{{- define "gpufleet.controllerSelectorLabels" -}}
{{ include "gpufleet.selectorLabels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "gpufleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpufleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the name of an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpufleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret the webhook's serving certificate lives in (tls.crt, tls.key); the webhook templates create or request it. */}}
{{- define "gpufleet.webhookSecretName" -}}
{{- include "gpufleet.fullname" . }}-webhook-tls
{{- end -}}

{{/* Where the controller's Lease lives: kubernetes.leaseNamespace, else the release's namespace. */}}
{{- define "gpufleet.leaseNamespace" -}}
{{- .Values.kubernetes.leaseNamespace | default .Release.Namespace -}}
{{- end -}}

{{/* -- the bundled PostgreSQL -------------------------------------------------------------------- */}}

{{- define "gpufleet.postgresql.fullname" -}}
{{- printf "%s-postgresql" (include "gpufleet.fullname" . | trunc 52 | trimSuffix "-") -}}
{{- end -}}

{{- define "gpufleet.postgresql.selectorLabels" -}}
{{ include "gpufleet.selectorLabels" . }}
app.kubernetes.io/component: database
{{- end -}}

{{/* The Secret and key that hold the store's SQLAlchemy URL (the controller's GPUFLEET_DB). */}}
{{- define "gpufleet.databaseSecretName" -}}
{{- if eq .Values.database.mode "external" -}}
{{- required "database.external.existingSecret: the Secret holding the PostgreSQL URL (database.mode is external)" .Values.database.external.existingSecret -}}
{{- else -}}
{{- include "gpufleet.postgresql.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "gpufleet.databaseSecretKey" -}}
{{- if eq .Values.database.mode "external" -}}
{{- .Values.database.external.key -}}
{{- else -}}
url
{{- end -}}
{{- end -}}

{{/* -- teams ----------------------------------------------------------------------------------------- */}}

{{/*
team → namespace, as JSON (fromJson it): the team's `namespace`, else its name. Refuses what
`gpufleet k8s policies` refuses: a name that is no namespace name, a kube- namespace, two teams in one.
*/}}
{{- define "gpufleet.teamNamespaces" -}}
{{- $out := dict -}}
{{- $owner := dict -}}
{{- range $team := keys .Values.teams | sortAlpha -}}
{{- $t := index $.Values.teams $team | default dict -}}
{{- $ns := $t.namespace | default $team -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $ns) -}}
{{- fail (printf "teams.%s: '%s' is not a namespace name (lowercase letters, digits and '-', 63 at most); give the team a `namespace`" $team $ns) -}}
{{- end -}}
{{- if or (has $ns (list "kube-system" "kube-public" "kube-node-lease")) (hasPrefix "kube-" $ns) -}}
{{- fail (printf "teams.%s.namespace: '%s' is a Kubernetes system namespace" $team $ns) -}}
{{- end -}}
{{- if hasKey $owner $ns -}}
{{- fail (printf "teams.%s.namespace: '%s' is team '%s''s namespace already" $team $ns (index $owner $ns)) -}}
{{- end -}}
{{- $_ := set $owner $ns $team -}}
{{- $_ := set $out $team $ns -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* -- gpufleet's settings file (gpufleet up --config /etc/gpufleet/config.yaml) ---------------------- */}}

{{/*
`config` (free-form settings) under what the chart manages: backend, host, port, log level, the
Kubernetes settings and the teams. The store URL is not here: GPUFLEET_DB comes from a Secret.
*/}}
{{- define "gpufleet.settings" -}}
{{- $k := .Values.kubernetes -}}
{{- $namespaces := include "gpufleet.teamNamespaces" . | fromJson -}}
{{- $mapped := dict -}}
{{- range $team, $ns := $namespaces -}}
{{- if ne $team $ns -}}{{- $_ := set $mapped $team $ns -}}{{- end -}}
{{- end -}}
{{- $kube := dict "lease_namespace" (include "gpufleet.leaseNamespace" .) "lease_name" $k.leaseName "lease_duration_s" $k.leaseDurationSeconds "adopt_interval_s" $k.adoptIntervalSeconds "default_image" $k.defaultImage "karpenter" $k.karpenter "dcgm_urls" $k.dcgmUrls "namespaces" $mapped -}}
{{- if $k.checkpointClaim -}}{{- $_ := set $kube "checkpoint_claim" $k.checkpointClaim -}}{{- end -}}
{{- $teams := dict -}}
{{- range $team, $t := .Values.teams -}}
{{- $s := dict -}}
{{- range $key := list "weight" "quota" "cohort" "borrowing_limit" "priority_classes" -}}
{{- $v := index ($t | default dict) $key -}}
{{- if not (kindIs "invalid" $v) -}}{{- $_ := set $s $key $v -}}{{- end -}}
{{- end -}}
{{- $_ := set $teams $team $s -}}
{{- end -}}
{{- $config := deepCopy .Values.config -}}
{{- $scheduler := get $config "scheduler" | default dict -}}
{{- if $teams -}}{{- $_ := set $scheduler "teams" (merge $teams (get $scheduler "teams" | default dict)) -}}{{- end -}}
{{- if $scheduler -}}{{- $_ := set $config "scheduler" $scheduler -}}{{- end -}}
{{- $managed := dict "backend" "kubernetes" "host" "0.0.0.0" "port" 8470 "log_level" .Values.logLevel "kubernetes" $kube -}}
{{- toYaml (mergeOverwrite $config $managed) -}}
{{- end -}}
