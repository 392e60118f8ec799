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
