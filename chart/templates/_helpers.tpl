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
{{- include "apportion.validatePorts" . }}
{{- include "apportion.validateKarpenterNodes" . }}
{{- end }}

{{/*
The three ports differ; with hostNetwork each is bound on the node itself, so
it must be one a non-root process without capabilities may bind (1024 and
above) and not one that the kubelet, kube-proxy or the Amazon VPC CNI
(aws-node) already binds on every EKS node.
*/}}
{{- define "apportion.validatePorts" -}}
{{- $ports := dict "webhook.port" (int .Values.webhook.port) "controller.metrics.port" (int .Values.controller.metrics.port) "controller.healthProbe.port" (int .Values.controller.healthProbe.port) }}
{{- $seen := dict }}
{{- range $name, $port := $ports }}
{{- with get $seen (toString $port) }}
{{- fail (printf "%s and %s are both %d: apportion serves the webhook, the metrics and the health probes on three different ports" . $name $port) }}
{{- end }}
{{- $_ := set $seen (toString $port) $name }}
{{- end }}
{{- if .Values.hostNetwork }}
{{- $taken := dict "10248" "the kubelet's health endpoint" "10249" "kube-proxy's metrics" "10250" "the kubelet" "10256" "kube-proxy's health check" "50051" "the Amazon VPC CNI (aws-node)" "61678" "the Amazon VPC CNI's metrics (aws-node)" "61679" "the Amazon VPC CNI's introspection (aws-node)" "8162" "the VPC CNI's network policy agent (metrics)" "8163" "the VPC CNI's network policy agent (health)" }}
{{- range $name, $port := $ports }}
{{- if lt $port 1024 }}
{{- fail (printf "%s=%d: with hostNetwork apportion binds the port on the node, and as a non-root user without capabilities it cannot bind one below 1024" $name $port) }}
{{- end }}
{{- with get $taken (toString $port) }}
{{- fail (printf "%s=%d: with hostNetwork apportion binds the port on the node, where %s already listens on it; choose a free port (see On Amazon EKS in docs/install.md)" $name $port .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"true" when karpenterNodes is allow: the chart then drops the default
affinity's karpenter.sh/nodepool DoesNotExist expression.
*/}}
{{- define "apportion.karpenterNodesAllowed" -}}
{{- eq (.Values.karpenterNodes | default "avoid") "allow" }}
{{- end }}

{{- define "apportion.isKarpenterExpression" -}}
{{- and (eq (toString .key) "karpenter.sh/nodepool") (eq (toString .operator) "DoesNotExist") }}
{{- end }}

{{/*
"true" when the pods' required node affinity keeps them off every node that
carries karpenter.sh/nodepool: each of its terms (they are ORed) has the
expression karpenter.sh/nodepool DoesNotExist.
*/}}
{{- define "apportion.offKarpenterNodes" -}}
{{- $terms := list }}
{{- with (.Values.affinity | default dict).nodeAffinity }}
{{- with .requiredDuringSchedulingIgnoredDuringExecution }}
{{- $terms = .nodeSelectorTerms | default list }}
{{- end }}
{{- end }}
{{- $off := gt (len $terms) 0 }}
{{- range $term := $terms }}
{{- $has := false }}
{{- range $e := ($term.matchExpressions | default list) }}
{{- if eq (include "apportion.isKarpenterExpression" $e) "true" }}
{{- $has = true }}
{{- end }}
{{- end }}
{{- $off = and $off $has }}
{{- end }}
{{- and $off (ne (include "apportion.karpenterNodesAllowed" .) "true") }}
{{- end }}

{{/*
On `helm install` and `helm upgrade` (not `helm template`, where lookup sees
no cluster and returns nothing): while the pods must stay off Karpenter's
nodes and no node lacks karpenter.sh/nodepool (EKS Auto Mode, or a cluster
whose every node Karpenter launched), the pods could never be scheduled and
the webhook would admit every pod unchanged without a word: refuse, and say
which value to set.
*/}}
{{- define "apportion.validateKarpenterNodes" -}}
{{- if eq (include "apportion.offKarpenterNodes" .) "true" }}
{{- $nodes := lookup "v1" "Node" "" "" }}
{{- if hasKey $nodes "items" }}
{{- $others := 0 }}
{{- range $nodes.items }}
{{- if not (hasKey (.metadata.labels | default dict) "karpenter.sh/nodepool") }}
{{- $others = add1 $others }}
{{- end }}
{{- end }}
{{- if eq $others 0 }}
{{- fail (printf "apportion's pods would stay Pending: every node of this cluster (%d) carries the label karpenter.sh/nodepool (Karpenter launched it, or it is an EKS Auto Mode node), and karpenterNodes=avoid keeps apportion off those nodes, so its webhook would admit every pod unchanged. Set --set karpenterNodes=allow to run apportion on Karpenter's nodes, or add nodes Karpenter does not manage (an EKS managed node group) and install again" (len $nodes.items)) }}
{{- end }}
{{- end }}
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
{{- if eq (include "apportion.karpenterNodesAllowed" .) "true" }}
{{- include "apportion.allowKarpenterNodes" $affinity }}
{{- end }}
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

{{/*
karpenterNodes=allow, on a copy of the affinity: drops the expression
karpenter.sh/nodepool DoesNotExist from the required node affinity (all of
it when a term held nothing else: that term then admits every node). No
preferred term takes its place: Karpenter ignores a pending pod whose
heaviest preferred term asks for karpenter.sh/nodepool DoesNotExist, and
would launch no node for it.
*/}}
{{- define "apportion.allowKarpenterNodes" -}}
{{- $na := get . "nodeAffinity" | default dict }}
{{- with get $na "requiredDuringSchedulingIgnoredDuringExecution" }}
{{- $terms := list }}
{{- $everyNode := false }}
{{- range $term := (.nodeSelectorTerms | default list) }}
{{- $exprs := list }}
{{- range $e := ($term.matchExpressions | default list) }}
{{- if ne (include "apportion.isKarpenterExpression" $e) "true" }}
{{- $exprs = append $exprs $e }}
{{- end }}
{{- end }}
{{- $kept := omit $term "matchExpressions" }}
{{- if $exprs }}
{{- $_ := set $kept "matchExpressions" $exprs }}
{{- end }}
{{- if $kept }}
{{- $terms = append $terms $kept }}
{{- else }}
{{- $everyNode = true }}
{{- end }}
{{- end }}
{{- if or $everyNode (not $terms) }}
{{- $_ := unset $na "requiredDuringSchedulingIgnoredDuringExecution" }}
{{- else }}
{{- $_ := set . "nodeSelectorTerms" $terms }}
{{- end }}
{{- end }}
{{- if $na }}
{{- $_ := set . "nodeAffinity" $na }}
{{- else }}
{{- $_ := unset . "nodeAffinity" }}
{{- end }}
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
