{{/* Object names: the release name when it contains the chart's name, else <release>-<name>. */}}
{{- define "otel-injector.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The pods' selector: the manifests' app.kubernetes.io/name, plus the release. */}}
{{- define "otel-injector.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "otel-injector.labels" -}}
{{ include "otel-injector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "otel-injector.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $repo = printf "%s/%s" .Values.image.registry $repo -}}{{- end -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" $repo $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the serving certificate. */}}
{{- define "otel-injector.tlsSecret" -}}
{{- if eq .Values.certificates.mode "existingSecret" -}}
{{- .Values.certificates.existingSecret.name -}}
{{- else -}}
{{- include "otel-injector.fullname" . }}-tls
{{- end -}}
{{- end -}}

{{/* DNS names of the webhook's Service. */}}
{{- define "otel-injector.serviceHosts" -}}
{{- $svc := printf "%s.%s.svc" (include "otel-injector.fullname" .) .Release.Namespace -}}
- {{ $svc }}
- {{ $svc }}.cluster.local
{{- end -}}

{{/* The ServiceAccount every binding names. */}}
{{- define "otel-injector.subjects" -}}
subjects:
  - kind: ServiceAccount
    name: {{ include "otel-injector.fullname" . }}
    namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* The namespaces never sent: the configured ones and the release's own. */}}
{{- define "otel-injector.excludedNamespaces" -}}
{{- $ns := concat .Values.webhook.excludedNamespaces (list .Release.Namespace) | uniq -}}
{{- toJson $ns -}}
{{- end -}}

{{/* What both webhook entries share: where and how the API server calls. */}}
{{- define "otel-injector.webhookEntry" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ .root.Values.webhook.failurePolicy }}
timeoutSeconds: {{ .root.Values.webhook.timeoutSeconds }}
reinvocationPolicy: IfNeeded
matchPolicy: Equivalent
clientConfig:
  service:
    name: {{ include "otel-injector.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: /mutate-v1-pod
    port: 443
  {{- if and (eq .root.Values.certificates.mode "existingSecret") .root.Values.certificates.existingSecret.caBundle }}
  caBundle: {{ .root.Values.certificates.existingSecret.caBundle }}
  {{- end }}
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
    scope: Namespaced
{{- end -}}
