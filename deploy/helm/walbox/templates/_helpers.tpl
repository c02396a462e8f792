{{/* The chart's name, at most 63 characters. */}}
{{- define "walbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release, with the chart's name unless it contains it. */}}
{{- define "walbox.fullname" -}}
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

{{- define "walbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "walbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "walbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "walbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The Secret mounted at /etc/walbox/secrets, or "" for none. */}}
{{- define "walbox.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else if .Values.secrets.files -}}
{{- include "walbox.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* Whether the Prometheus Operator's API is there or asked for. */}}
{{- define "walbox.monitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/* walbox's YAML configuration: the user's, plus standby with two or more
replicas. The metrics address is an environment variable of the Deployment:
the image sets WALBOX_METRICS_ADDR, which would win over the file. */}}
{{- define "walbox.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- $_ := set $cfg "standby" true -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
