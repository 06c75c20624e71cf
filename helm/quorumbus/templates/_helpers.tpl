{{/* Names. */}}
{{- define "quorumbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "quorumbus.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "quorumbus.headless" -}}
{{ include "quorumbus.fullname" . }}-headless
{{- end }}

{{- define "quorumbus.secretName" -}}
{{ default (include "quorumbus.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{- /* The Secret holding the cluster secret: clusterAuth.existingSecret, else the key's. */}}
{{- define "quorumbus.clusterSecretName" -}}
{{ default (include "quorumbus.secretName" .) .Values.clusterAuth.existingSecret }}
{{- end }}

{{- /* QUORUMBUS_CLUSTER_SECRET_ACCEPTED: each of clusterAuth.acceptedSecretKeys as a file
of the cluster-secret-accepted volume, comma-separated. */}}
{{- define "quorumbus.acceptedSecretFiles" -}}
{{- $files := list }}
{{- range .Values.clusterAuth.acceptedSecretKeys }}
{{- $files = append $files (printf "@/etc/quorumbus/cluster-secret-accepted/%s" .) }}
{{- end }}
{{- join "," $files }}
{{- end }}

{{- define "quorumbus.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "quorumbus.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "quorumbus.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "quorumbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quorumbus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Nodes that form a new cluster, and that every pod joins through. */}}
{{- define "quorumbus.bootstrapExpect" -}}
{{- $n := int .Values.replicaCount }}
{{- $e := .Values.cluster.bootstrapExpect }}
{{- if kindIs "invalid" $e }}{{ $e = min $n 3 }}{{ end }}
{{- if gt (int $e) $n }}
{{- fail (printf "cluster.bootstrapExpect (%d) exceeds replicaCount (%d): the cluster would never form" (int $e) $n) }}
{{- end }}
{{- int $e }}
{{- end }}

{{/* The stable DNS name of pod $i: NAME-i.NAME-headless.NAMESPACE.svc.DOMAIN. */}}
{{- define "quorumbus.podHost" -}}
{{- $ := index . 0 }}{{ $i := index . 1 -}}
{{ include "quorumbus.fullname" $ }}-{{ $i }}.{{ include "quorumbus.headless" $ }}.{{ $.Release.Namespace }}.svc.{{ $.Values.cluster.clusterDomain }}
{{- end }}

{{- define "quorumbus.join" -}}
{{- $hosts := list }}
{{- range $i := until (int (include "quorumbus.bootstrapExpect" .)) }}
{{- $hosts = append $hosts (printf "%s:5400" (include "quorumbus.podHost" (list $ $i))) }}
{{- end }}
{{- join "," $hosts }}
{{- end }}

{{/* The client Service's DNS name. */}}
{{- define "quorumbus.serviceHost" -}}
{{ include "quorumbus.fullname" . }}.{{ .Release.Namespace }}.svc.{{ .Values.cluster.clusterDomain }}
{{- end }}

{{- define "quorumbus.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "quorumbus.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}
