{{/* Chart name, overridable. */}}
{{- define "hitl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every namespaced resource name. */}}
{{- define "hitl.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "hitl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hitl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels selecting the controller pods. */}}
{{- define "hitl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hitl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The controller's ServiceAccount name. */}}
{{- define "hitl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hitl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The controller's username as the apiserver sees it. */}}
{{- define "hitl.controllerUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "hitl.serviceAccountName" .) }}
{{- end }}

{{/* The controller image reference; the tag defaults to the chart's appVersion. */}}
{{- define "hitl.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The gate sidecar image reference; each empty part falls back to the controller image's. */}}
{{- define "hitl.gateImage" -}}
{{- printf "%s:%s" (default .Values.image.repository .Values.gateImage.repository) (default (default .Chart.AppVersion .Values.image.tag) .Values.gateImage.tag) }}
{{- end }}

{{/* The agent runtime image reference. */}}
{{- define "hitl.agentImage" -}}
{{- printf "%s:%s" .Values.agentImage.repository .Values.agentImage.tag }}
{{- end }}

{{/* The Lease name used for leader election. */}}
{{- define "hitl.leaseName" -}}
{{- default (include "hitl.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
CEL, in the admission policies: the resource whose RBAC verbs cover an ApprovalRequest or
ApprovalGrant, by the kind its spec.agentRef names (Agent when unset, or ToolGate).
*/}}
{{- define "hitl.policyResource" -}}
has(object.spec.agentRef.kind) && object.spec.agentRef.kind == 'ToolGate' ? 'toolgates' : 'agents'
{{- end }}

{{/*
The session store (`hitl-operator sessions`, docs/install.md "The session store"): the name of
its Deployment, Service, ServiceAccount, PVC and RBAC. The release name is cut first so that the
suffix survives (a release name is at most 53 characters; this stays within 63).
*/}}
{{- define "hitl.sessions.name" -}}
{{- printf "%s-sessions" (.Release.Name | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/* Labels selecting the session store's pods. The controller's Agent egress NetworkPolicies
select them by app.kubernetes.io/component: session-store in the release namespace. */}}
{{- define "hitl.sessions.selectorLabels" -}}
app.kubernetes.io/name: hitl-sessions
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: session-store
{{- end }}

{{/* Labels on every object of the session store. */}}
{{- define "hitl.sessions.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hitl.sessions.selectorLabels" . }}
app.kubernetes.io/part-of: {{ include "hitl.name" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The session store's image; each empty part falls back to the controller image's. */}}
{{- define "hitl.sessions.image" -}}
{{- printf "%s:%s" (default .Values.image.repository .Values.sessions.image.repository) (default (default .Chart.AppVersion .Values.image.tag) .Values.sessions.image.tag) }}
{{- end }}

{{/* The URL of the session store's API, as the controller renders it into each Agent's
KAGENT_URL. */}}
{{- define "hitl.sessions.url" -}}
{{- printf "http://%s.%s.svc:8083" (include "hitl.sessions.name" .) .Release.Namespace }}
{{- end }}

{{/* Which database the store keeps: postgres, sqlite or memory. */}}
{{- define "hitl.sessions.backend" -}}
{{- if .Values.sessions.postgres.existingSecret -}}
postgres
{{- else if .Values.sessions.persistence.enabled -}}
sqlite
{{- else -}}
memory
{{- end }}
{{- end }}

{{/* The claim holding the SQLite file: the chart's or sessions.persistence.existingClaim. */}}
{{- define "hitl.sessions.claimName" -}}
{{- default (include "hitl.sessions.name" .) .Values.sessions.persistence.existingClaim }}
{{- end }}
