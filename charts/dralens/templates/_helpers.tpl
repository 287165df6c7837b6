{{/* Shared names, labels and pod pieces. */}}

{{- define "dralens.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name prefix: at most 47 characters, so "<fullname>-cluster-..." stays below 63. */}}
{{- define "dralens.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dralens.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dralens.labels" -}}
helm.sh/chart: {{ include "dralens.chart" . }}
{{ include "dralens.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "dralens.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dralens.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one role's objects; call with (dict "ctx" $ "component" "node"). */}}
{{- define "dralens.componentLabels" -}}
{{ include "dralens.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "dralens.componentSelectorLabels" -}}
{{ include "dralens.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "dralens.nodeServiceAccountName" -}}
{{- default (printf "%s-node" (include "dralens.fullname" .)) .Values.node.serviceAccount.name }}
{{- end }}

{{- define "dralens.clusterServiceAccountName" -}}
{{- default (printf "%s-cluster" (include "dralens.fullname" .)) .Values.cluster.serviceAccount.name }}
{{- end }}

{{- define "dralens.leaseName" -}}
{{- default (printf "%s-cluster" (include "dralens.fullname" .)) .Values.cluster.leaderElection.leaseName }}
{{- end }}

{{- define "dralens.leaseNamespace" -}}
{{- default .Release.Namespace .Values.cluster.leaderElection.leaseNamespace }}
{{- end }}

{{- define "dralens.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The plugin's own directory under the kubelet plugins dir: dra.sock and the checkpoint. */}}
{{- define "dralens.pluginDir" -}}
{{- printf "%s/%s" (.Values.node.hostPaths.kubeletPluginsDir | trimSuffix "/") .Values.driverName }}
{{- end }}

{{/*
Environment shared by both roles: the pod's identity from the downward API and, when tracing
is on, the OTEL_* variables.
*/}}
{{- define "dralens.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
{{- with .Values.tracing }}
{{- if .enabled }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ required "tracing.endpoint is required when tracing.enabled is true" .endpoint | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- if .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | quote }}
{{- end }}
- name: OTEL_EXPORTER_OTLP_COMPRESSION
  value: {{ .compression | quote }}
{{- $attrs := list "k8s.pod.name=$(POD_NAME)" "k8s.pod.uid=$(POD_UID)" "k8s.namespace.name=$(POD_NAMESPACE)" }}
{{- range $k, $v := .resourceAttributes }}
{{- $attrs = append $attrs (printf "%s=%s" $k (toString $v)) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $attrs | quote }}
{{- if .headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .headersSecret.name }}
      key: {{ .headersSecret.key }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* HTTP probes on the metrics port; call with (dict "path" "/healthz" "port" 9477 "probe" .). */}}
{{- define "dralens.probe" -}}
httpGet:
  path: {{ .path }}
  port: metrics
{{ toYaml .probe }}
{{- end }}
