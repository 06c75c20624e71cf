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

{{- /* REGISTRY/REPOSITORY:TAG, or @DIGEST when image.digest is set (then the tag is
not used); REGISTRY is global.imageRegistry, for a mirror or private registry. */}}
{{- define "quorumbus.image" -}}
{{- $repo := required "\n\nimage.repository is required: no public registry publishes a Quorumbus image, and a bare name would be pulled from docker.io/library/. Build it with `make image` (bin/quorumbus-image.tar, tagged quorumbus:<appVersion>), then either load it into the cluster's nodes (kind load image-archive, ctr images import) and set image.repository=quorumbus, or push it to your registry and set image.repository=REGISTRY/quorumbus (docs/deploy-kubernetes.md, \"The image\")." .Values.image.repository }}
{{- with .Values.global.imageRegistry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- /* Every object's labels: the chart's, then commonLabels (which cannot replace them). */}}
{{- define "quorumbus.labels" -}}
{{- $l := dict "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-") }}
{{- $_ := set $l "app.kubernetes.io/version" .Chart.AppVersion }}
{{- $_ = set $l "app.kubernetes.io/managed-by" .Release.Service }}
{{- $l = merge $l (include "quorumbus.selectorLabels" . | fromYaml) (deepCopy .Values.commonLabels) }}
{{- toYaml $l }}
{{- end }}

{{- /* An object's annotations block: commonAnnotations, then .extra (which wins); nothing
when both are empty. Call with (dict "ctx" $ "extra" ANNOTATIONS). */}}
{{- define "quorumbus.annotations" -}}
{{- $a := merge (dict) (deepCopy (.extra | default dict)) (deepCopy (.ctx.Values.commonAnnotations | default dict)) }}
{{- with $a -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- /* The pod template's labels: the node pods' selector labels, then podLabels, then
commonLabels. */}}
{{- define "quorumbus.podLabels" -}}
{{- toYaml (merge (include "quorumbus.podSelectorLabels" . | fromYaml) (deepCopy .Values.podLabels) (deepCopy .Values.commonLabels)) }}
{{- end }}

{{- define "quorumbus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "quorumbus.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "quorumbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quorumbus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /* The node pods only: what the Services, the PDB, the spread constraints and the
NetworkPolicy select. The helm-test pod carries the release's labels too but another
component, so it never counts against the PDB (an uncontrolled pod there would allow
no disruption) nor skews the spread. (The StatefulSet's own selector is immutable and
stays quorumbus.selectorLabels; its controller only claims pods named after it.) */}}
{{- define "quorumbus.podSelectorLabels" -}}
{{ include "quorumbus.selectorLabels" . }}
app.kubernetes.io/component: broker
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

{{- /* The security contexts: the chart's (the restricted Pod Security Standard), each key
of podSecurityContext / containerSecurityContext replacing the chart's key of that name. */}}
{{- define "quorumbus.podSecurityContextMerged" -}}
{{- $c := include "quorumbus.podSecurityContext" . | fromYaml }}
{{- range $k, $v := .Values.podSecurityContext }}{{ $_ := set $c $k $v }}{{ end }}
{{- toYaml $c }}
{{- end }}

{{- define "quorumbus.containerSecurityContextMerged" -}}
{{- $c := include "quorumbus.containerSecurityContext" . | fromYaml }}
{{- range $k, $v := .Values.containerSecurityContext }}{{ $_ := set $c $k $v }}{{ end }}
{{- toYaml $c }}
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

{{- /* Refuse, at install and upgrade, a Secret you manage that is in the cluster but
lacks a key the pods read: they would wait in CreateContainerConfigError. A Secret not
found may be on its way (External Secrets, sealed-secrets), and a render without the
cluster (helm template) finds none: both pass. */}}
{{- define "quorumbus.checkSecretKeys" -}}
{{- $need := list }}
{{- with .Values.auth.existingSecret }}
{{- $need = append $need (list . $.Values.auth.secretKey "auth.secretKey (the namespace key)") }}
{{- end }}
{{- if and .Values.clusterAuth.enabled (or .Values.clusterAuth.existingSecret .Values.auth.existingSecret) }}
{{- $name := include "quorumbus.clusterSecretName" . }}
{{- $need = append $need (list $name .Values.clusterAuth.secretKey "clusterAuth.secretKey (the cluster secret, clusterAuth.enabled)") }}
{{- range .Values.clusterAuth.acceptedSecretKeys }}
{{- $need = append $need (list $name . "clusterAuth.acceptedSecretKeys") }}
{{- end }}
{{- end }}
{{- range $need }}
{{- $name := index . 0 }}{{- $key := index . 1 }}{{- $why := index . 2 }}
{{- with lookup "v1" "Secret" $.Release.Namespace $name }}
{{- if not (hasKey (.data | default dict) $key) }}
{{- fail (printf "\n\nSecret %q (namespace %s) has no key %q, which the pods read for %s: they could not start. Add the key to the Secret, or create the Secret with every key the chart reads (docs/deploy-kubernetes.md, \"The key\")." $name $.Release.Namespace $key $why) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* cluster.zoneFromNode binds a ClusterRole to the pods' ServiceAccount: one the chart
creates or one named, never the namespace's default (every other pod there would get
it too). cluster.zone and zoneFromNode exclude each other. */}}
{{- define "quorumbus.checkZone" -}}
{{- if .Values.cluster.zoneFromNode }}
{{- if .Values.cluster.zone }}
{{- fail (printf "\n\ncluster.zone (%q) and cluster.zoneFromNode are both set: a fixed zone for every pod, or each pod's node's zone; set one" .Values.cluster.zone) }}
{{- end }}
{{- if not (include "quorumbus.serviceAccountName" .) }}
{{- fail "\n\ncluster.zoneFromNode binds a ClusterRole (get on nodes) to the pods' ServiceAccount: set serviceAccount.create=true (or serviceAccount.name to one you manage), so that the namespace's default ServiceAccount does not get it" }}
{{- end }}
{{- end }}
{{- end }}

{{- /* The name of cluster-scoped objects of the release (ClusterRole, ClusterRoleBinding):
unique over namespaces. */}}
{{- define "quorumbus.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "quorumbus.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* backup.toolsImage, behind global.imageRegistry as the chart's image is. */}}
{{- define "quorumbus.toolsImage" -}}
{{- $i := .Values.backup.toolsImage }}
{{- $repo := $i.repository }}
{{- with .Values.global.imageRegistry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end }}
{{- if $i.digest }}
{{- printf "%s@%s" $repo $i.digest }}
{{- else }}
{{- printf "%s:%s" $repo (required "backup.toolsImage.tag or digest is required" $i.tag) }}
{{- end }}
{{- end }}
