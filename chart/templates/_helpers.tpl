{{/*
The chart's name: the app.kubernetes.io/name label of every resource. The pods
webhook never mutates pods carrying it (objectSelector).
*/}}
{{- define "apportion.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: of the Deployment, Service, ServiceAccount, (Cluster)Role(Binding)s,
PodDisruptionBudget, both webhook configurations and the leader election Lease.
*/}}
{{- define "apportion.fullname" -}}
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

{{/*
"<fullname>-<suffix>", the full name shortened so that the result has at most
63 characters: (dict "root" $ "suffix" "cert").
*/}}
{{- define "apportion.suffixed" -}}
{{- $max := sub 62 (len .suffix) | int }}
{{- printf "%s-%s" (include "apportion.fullname" .root | trunc $max | trimSuffix "-") .suffix }}
{{- end }}

{{- define "apportion.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every resource.
*/}}
{{- define "apportion.labels" -}}
helm.sh/chart: {{ include "apportion.chart" . }}
app.kubernetes.io/name: {{ include "apportion.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of the webhook pods (Deployment selector, Service, PDB,
ServiceMonitor, default anti-affinity and topology spread). The component label
keeps the pre-delete Job's pod out of all of these.
*/}}
{{- define "apportion.selectorLabels" -}}
app.kubernetes.io/name: {{ include "apportion.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
additionalAnnotations as a metadata.annotations block (nothing when empty).
*/}}
{{- define "apportion.annotations" -}}
{{- with .Values.additionalAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "apportion.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "apportion.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image: repository@digest when a digest is set, else repository:tag (the
tag defaults to the chart's appVersion).
*/}}
{{- define "apportion.image" -}}
{{- $img := .Values.controller.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the serving certificate: created empty by the chart and
filled by apportion (self-managed), written by cert-manager, or the user's own.
*/}}
{{- define "apportion.certSecretName" -}}
{{- if eq .Values.certificates.mode "provided" }}
{{- .Values.certificates.provided.secretName }}
{{- else }}
{{- include "apportion.suffixed" (dict "root" . "suffix" "cert") }}
{{- end }}
{{- end }}

{{/*
The name of the metrics port (container and Service): https-metrics when it
serves HTTPS, http-metrics otherwise.
*/}}
{{- define "apportion.metricsPortName" -}}
{{- ternary "https-metrics" "http-metrics" (.Values.controller.metrics.secure | default false) }}
{{- end }}

{{- define "apportion.certDir" -}}
/tmp/k8s-webhook-server/serving-certs
{{- end }}

{{/*
Checks that fail the render with a clear message.
*/}}
{{- define "apportion.validate" -}}
{{- if not .Values.controller.image.repository }}
{{- fail "controller.image.repository is required: no apportion image is published yet. Push one with `make release-push REGISTRY=<registry> VERSION=<version>` and set --set controller.image.repository=<registry>/apportion" }}
{{- end }}
{{- /*
The oldest Kubernetes of the tested compatibility matrix. Checked here, not
with Chart.yaml's kubeVersion: `helm template` without --kube-version (and
kustomize's helmCharts, which runs it) assumes helm's built-in version,
v1.20.0 in a helm built from source, which kubeVersion would refuse. That
exact version is let through; any other below the floor is refused.
*/}}
{{- $kube := .Capabilities.KubeVersion.Version }}
{{- if and (ne $kube "v1.20.0") (semverCompare "<1.32.0-0" $kube) }}
{{- fail (printf "apportion needs Kubernetes 1.32 or newer (the oldest minor Amazon EKS still supports), this cluster runs %s" $kube) }}
{{- end }}
{{- $mode := .Values.certificates.mode }}
{{- if eq $mode "provided" }}
{{- if not .Values.certificates.provided.secretName }}
{{- fail "certificates.mode=provided needs certificates.provided.secretName: an existing kubernetes.io/tls Secret (tls.crt, tls.key) in the release namespace" }}
{{- end }}
{{- if not .Values.certificates.provided.caBundle }}
{{- fail "certificates.mode=provided needs certificates.provided.caBundle: the base64-encoded PEM of the CA that signed the Secret's certificate" }}
{{- end }}
{{- end }}
{{- $shutdown := include "apportion.seconds" .Values.settings.gracefulShutdownTimeout | float64 }}
{{- $budget := sub (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds) | float64 }}
{{- if ge $shutdown $budget }}
{{- fail (printf "settings.gracefulShutdownTimeout (%s) must be below terminationGracePeriodSeconds (%d) minus preStopSleepSeconds (%d), or the kubelet kills apportion before it has shut down" .Values.settings.gracefulShutdownTimeout (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds)) }}
{{- end }}
{{- $profiles := .Values.settings.runtimeClassProfiles | default list }}
{{- $deprecated := .Values.runtimeClassProfiles | default list }}
{{- if and $profiles $deprecated (ne (toJson $profiles) (toJson $deprecated)) }}
{{- fail "settings.runtimeClassProfiles and the deprecated top-level runtimeClassProfiles are both set, to different lists: keep only settings.runtimeClassProfiles" }}
{{- end }}
{{- end }}

{{/*
The runtime-class profiles as JSON: settings.runtimeClassProfiles, else the
top-level runtimeClassProfiles of earlier releases, so that their values
files keep working (apportion.validate refuses two different lists).
*/}}
{{- define "apportion.runtimeClassProfiles" -}}
{{- .Values.settings.runtimeClassProfiles | default .Values.runtimeClassProfiles | default list | toJson }}
{{- end }}

{{/*
A Go duration ("1m30s", "500ms") in seconds. values.schema.json has already
checked the format.
*/}}
{{- define "apportion.seconds" -}}
{{- $units := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(h|ms|m|s|us|µs|ns)" (toString .) -1 }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $unit := trimPrefix $num . }}
{{- $total = addf $total (mulf (float64 $num) (get $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Adds the pod selector labels to every pod (anti-)affinity term and topology
spread constraint that has no labelSelector. Works on copies, not on .Values.
*/}}
{{- define "apportion.withSelector" -}}
{{- if not (hasKey .term "labelSelector") }}
{{- $_ := set .term "labelSelector" (dict "matchLabels" (include "apportion.selectorLabels" .root | fromYaml)) }}
{{- end }}
{{- end }}

{{- define "apportion.affinity" -}}
{{- $affinity := deepCopy .Values.affinity }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- $pa := get $affinity $kind }}
{{- if $pa }}
{{- range $term := (get $pa "requiredDuringSchedulingIgnoredDuringExecution" | default list) }}
{{- include "apportion.withSelector" (dict "term" $term "root" $) }}
{{- end }}
{{- range $weighted := (get $pa "preferredDuringSchedulingIgnoredDuringExecution" | default list) }}
{{- include "apportion.withSelector" (dict "term" $weighted.podAffinityTerm "root" $) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{- define "apportion.topologySpreadConstraints" -}}
{{- $constraints := deepCopy .Values.topologySpreadConstraints }}
{{- range $c := $constraints }}
{{- include "apportion.withSelector" (dict "term" $c "root" $) }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/*
Namespaces neither webhook looks at: settings.excludedNamespaces and the
release namespace (apportion's own).
*/}}
{{- define "apportion.excludedNamespaces" -}}
{{- $list := concat .Values.settings.excludedNamespaces (list .Release.Namespace) | uniq }}
{{- toJson $list }}
{{- end }}

{{/*
namespaceSelector of the webhooks: root, extra (matchExpressions ANDed in,
optional).
*/}}
{{- define "apportion.namespaceSelector" -}}
{{- $root := .root -}}
{{- $extra := .extra | default list -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "apportion.excludedNamespaces" $root }}
    # Label a namespace apportion.dev/ignore (any value) to leave it alone.
    - key: apportion.dev/ignore
      operator: DoesNotExist
    {{- with $extra }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $root.Values.webhook.namespaceSelectorExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/*
Whether the pod webhook is scoped (webhook.scope: namespaces): "true" or
empty. settings.architectures: all places every pod, so every pod must
reach apportion and nothing is scoped.
*/}}
{{- define "apportion.webhookScoped" -}}
{{- if and (eq .Values.webhook.scope "namespaces") (ne .Values.settings.architectures "all") }}true{{ end }}
{{- end }}

{{/*
The CEL match condition of the pod webhook entry outside labelled
namespaces: the pod carries an apportion.dev/* annotation, a strategy under
the AWS sample webhooks' names, or a runtime-class profile's
runtimeClassName.
*/}}
{{- define "apportion.podCondition" -}}
{{- $cond := "has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('apportion.dev/') || k == 'custom-pod-schedule-strategy' || k == 'CustomPodScheduleStrategy')" }}
{{- $classes := list }}
{{- range include "apportion.runtimeClassProfiles" . | fromJsonArray }}
{{- $classes = append $classes (printf "'%s'" .runtimeClassName) }}
{{- end }}
{{- if $classes }}
{{- $cond = printf "(%s) || (has(object.spec.runtimeClassName) && object.spec.runtimeClassName in [%s])" $cond (join ", " $classes) }}
{{- end }}
{{- $cond }}
{{- end }}

{{/*
One entry of the pod mutating webhook: name, namespaceExpressions (ANDed
into the namespace selector), condition (a CEL match condition, optional).
*/}}
{{- define "apportion.podWebhook" -}}
{{- $root := .root -}}
- name: {{ .name }}
  admissionReviewVersions: ["v1"]
  {{- include "apportion.clientConfig" (dict "root" $root "path" "/mutate--v1-pod") | nindent 2 }}
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
      scope: Namespaced
  failurePolicy: Ignore
  matchPolicy: Equivalent
  sideEffects: NoneOnDryRun
  # Called again when a later webhook changed the pod; apportion's patch is
  # idempotent.
  reinvocationPolicy: IfNeeded
  timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
  {{- include "apportion.namespaceSelector" (dict "root" $root "extra" .namespaceExpressions) | nindent 2 }}
  objectSelector:
    matchExpressions:
      # Never apportion's own pods (nor its pre-delete Job), nor
      # Karpenter's: they must start without waiting for a placement leader.
      - key: app.kubernetes.io/name
        operator: NotIn
        values: {{ list (include "apportion.name" $root) "karpenter" | uniq | toJson }}
      {{- with $root.Values.webhook.objectSelectorExpressions }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  {{- with .condition }}
  matchConditions:
    - name: carries-apportion
      expression: {{ . | quote }}
  {{- end }}
{{- end }}

{{/*
clientConfig of a webhook: always the Service (port 443), never a URL. The
caBundle depends on the certificate mode: self-managed leaves it out (apportion
writes it, and Helm's three-way merge keeps what it wrote on upgrade:
neither the old nor the new manifest has the field); cert-manager's CA
injector fills it from the inject-ca-from annotation; provided sets it here.
*/}}
{{- define "apportion.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "apportion.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- if eq .root.Values.certificates.mode "provided" }}
  caBundle: {{ .root.Values.certificates.provided.caBundle | quote }}
  {{- end }}
{{- end }}

{{/*
Annotations of both webhook configurations. In cert-manager mode the CA
injector copies the chart's CA Certificate (certificates.yaml), which the
serving certificate's renewals leave unchanged; with the user's issuer, the CA
of the serving Certificate's Secret.
*/}}
{{- define "apportion.webhookAnnotations" -}}
{{- $ann := deepCopy (.Values.additionalAnnotations | default dict) }}
{{- if eq .Values.certificates.mode "cert-manager" }}
{{- $from := include "apportion.suffixed" (dict "root" . "suffix" "ca") }}
{{- if .Values.certificates.certManager.issuerRef.name }}
{{- $from = include "apportion.suffixed" (dict "root" . "suffix" "cert") }}
{{- end }}
{{- $_ := set $ann "cert-manager.io/inject-ca-from" (printf "%s/%s" .Release.Namespace $from) }}
{{- end }}
{{- with $ann }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The Secret holding the key decisions are signed with. */}}
{{- define "apportion.decisionKeySecretName" -}}
{{- if .Values.settings.decisionKeySecret }}
{{- .Values.settings.decisionKeySecret }}
{{- else }}
{{- include "apportion.suffixed" (dict "root" . "suffix" "decision-key") }}
{{- end }}
{{- end }}
