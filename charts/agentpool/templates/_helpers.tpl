{{/*
Names, labels and the few decisions that several templates share, so that the Deployment's
flags, the RBAC and the peering objects can never disagree with each other.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "agentpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>", or the release name when it already contains the chart name. */}}
{{- define "agentpool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the operator pods; they never change over upgrades. */}}
{{- define "agentpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The recommended app.kubernetes.io labels on every object the chart creates. */}}
{{- define "agentpool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "agentpool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: agentpool
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "agentpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentpool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image; the tag defaults to the chart's appVersion, never to "latest". */}}
{{- define "agentpool.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
"true" when more than one operator pod runs without sharePools: they then share a kopf peering
object, so the one with the highest priority acts and the others stand by. One pod runs
standalone.
*/}}
{{- define "agentpool.peering" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.sharePools) }}true{{ end }}
{{- end }}

{{/*
"true" when the operator pods share the pools (`agentpool run --share NAME`): each works on
those assigned to it through Leases in the release namespace.
*/}}
{{- define "agentpool.sharing" -}}
{{- if .Values.sharePools }}true{{ end }}
{{- end }}

{{/* The name of the kopf peering object the replicas share (`agentpool run --peering NAME`). */}}
{{- define "agentpool.peeringName" -}}
{{- include "agentpool.fullname" . }}
{{- end }}

{{/* kopf's liveness endpoint port; the probe and the --liveness flag both use it. */}}
{{- define "agentpool.healthPort" -}}
{{ .Values.healthPort }}
{{- end }}

{{/* The namespaces that get a NetworkPolicy around their agent pods. */}}
{{- define "agentpool.networkPolicyNamespaces" -}}
{{- $namespaces := .Values.networkPolicy.namespaces | default .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- toJson $namespaces }}
{{- end }}

{{/* The gateway's Service, whose DNS names its certificate holds and its URL names. */}}
{{- define "agentpool.gatewayService" -}}
{{- printf "%s-gateway" (include "agentpool.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret with the gateway's certificate: the one given, or the one the operator keeps. */}}
{{- define "agentpool.gatewaySecret" -}}
{{- .Values.gateway.tlsSecret | default (printf "%s-gateway-tls" (include "agentpool.fullname" .)) }}
{{- end }}

{{/* The namespaces whose pods may reach the gateway, when a NetworkPolicy guards it. */}}
{{- define "agentpool.gatewayNamespaces" -}}
{{- toJson (.Values.networkPolicy.gatewayNamespaces | default .Values.watchNamespaces) }}
{{- end }}
