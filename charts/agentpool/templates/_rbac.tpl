{{/*
The RBAC rules, in two halves: what the operator needs in each namespace it serves, and what
kopf needs cluster-wide. Every verb here is one the operator or kopf sends; nothing is granted
in case it might be useful.
*/}}

{{/* Rules for the namespaces the operator serves (a Role each, or the ClusterRole). */}}
{{- define "agentpool.rules.namespaced" -}}
# kopf lists and watches the three kinds, and patches them to add and remove its finalizer and
# to keep its progress annotations.
- apiGroups: ["agentpool.dev"]
  resources: ["agentpools", "poolruns", "agentleases"]
  verbs: ["list", "watch", "patch"]
# A run or a lease reads the spec of the AgentPool it names (its size and timeouts) by name.
- apiGroups: ["agentpool.dev"]
  resources: ["agentpools"]
  verbs: ["get"]
# A finished PoolRun is deleted once spec.ttlSecondsAfterFinished has passed.
- apiGroups: ["agentpool.dev"]
  resources: ["poolruns"]
  verbs: ["delete"]
# The three kinds have a status subresource, so their status is patched there.
- apiGroups: ["agentpool.dev"]
  resources: ["agentpools/status", "poolruns/status", "agentleases/status"]
  verbs: ["patch"]
# Agent pods and token Secrets name their AgentPool as owner with blockOwnerDeletion, which
# clusters running the OwnerReferencesPermissionEnforcement admission plugin (OpenShift, for one)
# allow only to those who may update the owner's finalizers. No request is ever sent to it.
- apiGroups: ["agentpool.dev"]
  resources: ["agentpools/finalizers"]
  verbs: ["update"]
# Agent pods: listed and watched (kopf, by the pool label) to track each pool, created to fill a
# pool and deleted to retire an agent.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "delete"]
# The per-pool token Secret that agent requests are authenticated with: created once, then read
# back (also after a restart) to call the agents, and re-created if it goes. Each bound lease's
# own token Secret (<lease>-lease-token): created when it binds, read back after a restart, and
# deleted when it ends. Secrets are never listed or changed.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "delete"]
# PoolRun sources read from a ConfigMap, and outputs too large for status written to ConfigMaps
# the run owns: created, read back after a restart, and patched when a restarted operator writes
# a chunk that already exists. The run's ownerReference deletes them with it.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# Events about pools and runs, which the operator posts through kopf, and those that count a
# pool's leases bound and expired, which it posts itself (core/v1 Events). Listed, by the field
# selector reason=Unhealthy, only while an agent runs without turning Ready, to repeat its
# readiness probe's last error in the pool's Degraded condition.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
{{- if and (include "agentpool.sharing" .) .Values.gateway.enabled }}
# Replicas that share the pools pass a call on to the replica that works on its pool as
# themselves (once the caller's own token was checked), and that replica's gateway checks them
# as it checks any caller: create on agentpools/call and /cast ...
- apiGroups: ["agentpool.dev"]
  resources: ["agentpools/call", "agentpools/cast"]
  verbs: ["create"]
# ... and a forwarded request to an HTTP pool or a lease's agent, its method's verb.
- apiGroups: ["agentpool.dev"]
  resources: ["agentpools/proxy", "agentleases/proxy"]
  verbs: ["get", "create", "update", "patch", "delete"]
{{- end }}
{{- if and (include "agentpool.peering" .) .Values.watchNamespaces }}
# Namespaced kopf peering: each replica lists and watches the KopfPeering object and patches its
# keep-alive into it, so only the highest-priority replica acts.
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{/* Rules that only a ClusterRole can grant. */}}
{{- define "agentpool.rules.cluster" -}}
# kopf watches CustomResourceDefinitions to notice when the resources it serves change.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- if .Values.watchNamespaces }}
# Serving a list of namespaces, kopf lists and watches namespaces to learn which of them exist.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- if .Values.gateway.enabled }}
# The gateway asks the cluster who holds a caller's token (TokenReview) and whether they may
# create agentpools/call or agentpools/cast of the pool (SubjectAccessReview), as
# kube-rbac-proxy does, keeping each answer for a few seconds.
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
# ... and whether they may call the pool: a SubjectAccessReview per caller and pool.
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
{{- if and (include "agentpool.peering" .) (not .Values.watchNamespaces) }}
# Cluster-wide kopf peering: each replica lists and watches the ClusterKopfPeering object and
# patches its keep-alive into it, so only the highest-priority replica acts.
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}

{{/* Rules in the release namespace: the gateway's certificate Secret. */}}
{{- define "agentpool.rules.release" -}}
# The gateway's certificate, read at start by its name{{ if not .Values.gateway.tlsSecret }}; made on first start, and renewed (patched) when it no longer names the gateway or is about to expire{{ end }}.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ include "agentpool.gatewaySecret" . | quote }}]
  verbs: {{ if .Values.gateway.tlsSecret }}["get"]{{ else }}["get", "patch"]{{ end }}
{{- if not .Values.gateway.tlsSecret }}
# A Secret is created before it has a name to grant on: the certificate's, on first start.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* Rules in the release namespace for replicas that share the pools: their Leases. */}}
{{- define "agentpool.rules.replicas" -}}
# Each replica's own Lease (created, renewed by patch, deleted as it exits) and the assigner's
# (read, created, and replaced to renew or take it, conditional on its version); the assigner
# lists them all by the group's label to learn which replicas are live.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "create", "update", "patch", "delete"]
{{- end }}
