{{/*
The chart's name, truncated to the 63 characters of a DNS label.
*/}}
{{- define "switchyard.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: the release name, or release-chart when the
release name does not contain the chart's.
*/}}
{{- define "switchyard.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
Labels that select the gateway's pods; they never change for a release.
*/}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The Secret holding the admin token: the existing one named in the values, or
the one the chart creates.
*/}}
{{- define "switchyard.adminTokenSecret" -}}
{{- if .Values.adminToken.existingSecret }}
{{- .Values.adminToken.existingSecret }}
{{- else }}
{{- printf "%s-admin-token" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The ConfigMap holding the policy.
*/}}
{{- define "switchyard.configMap" -}}
{{- printf "%s-config" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
