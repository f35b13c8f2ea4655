{{/* The chart's name, or nameOverride. */}}
{{- define "oncegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name: fullnameOverride, or release-chart. */}}
{{- define "oncegate.fullname" -}}
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

{{- define "oncegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "oncegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "oncegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "oncegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: consumer
{{- end }}

{{- define "oncegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "oncegate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The NATS URL the consumers join. */}}
{{- define "oncegate.natsURL" -}}
{{- .Values.nats.url }}
{{- end }}

{{/*
Whether the consumers use NATS: for pipelines, the webhook ingress, the
console, or a cache in JetStream KV (llm.cache.store, which follows
ledger.store unless set). The proxy alone on Badger needs none.
*/}}
{{- define "oncegate.needsNATS" -}}
{{- $c := .Values.config | default dict }}
{{- $cache := dig "llm" "cache" "store" "" $c }}
{{- if or (gt (len ($c.pipelines | default list)) 0) .Values.ingress.enabled .Values.console.enabled (eq $cache "kv") (and (eq $cache "") (eq .Values.ledger.store "kv")) }}true{{ end }}
{{- end }}

{{/* Where the pod mounts what. */}}
{{- define "oncegate.dataDir" -}}/var/lib/oncegate{{- end }}
{{- define "oncegate.configDir" -}}/etc/oncegate{{- end }}
{{- define "oncegate.secretsDir" -}}/etc/oncegate/secrets{{- end }}

{{/*
The checks values.schema.json cannot make across values. Each fails the
render with the reason.
*/}}
{{- define "oncegate.validate" -}}
{{- if and (eq .Values.ledger.store "badger") (ne (int .Values.replicas) 1) }}
{{- fail (printf "ledger.store badger takes replicas: 1, not %d: one process owns a Badger ledger's directory. To run several consumers, set ledger.store: kv (the JetStream KV ledger; see values-kv.yaml)" (int .Values.replicas)) }}
{{- end }}
{{- if and (not (include "oncegate.natsURL" .)) (include "oncegate.needsNATS" .) }}
{{- fail "nats.url is required: the NATS deployment with JetStream the consumers join, e.g. nats://nats.nats.svc.cluster.local:4222 (the official NATS chart, installed with deploy/helm/nats-values.yaml: see docs/operations.md)" }}
{{- end }}
{{- $c := .Values.config | default dict }}
{{- $llm := $c.llm | default dict }}
{{- if not (or $llm.base_url $llm.standin) }}
{{- $users := list }}
{{- range $p := ($c.pipelines | default list) }}
{{- if $p.step }}{{ $users = append $users (printf "pipeline %s" $p.name) }}{{ end }}
{{- end }}
{{- if .Values.proxy.enabled }}{{ $users = append $users "the proxy" }}{{ end }}
{{- if $users }}
{{- fail (printf "%s %s a model: set config.llm.base_url to an OpenAI-compatible endpoint (and secrets.llmAPIKey for its key), or config.llm.standin: true for the offline stand-in model, which makes its answers up" (join " and " $users) (ternary "needs" "need" (eq (len $users) 1))) }}
{{- end }}
{{- end }}
{{- if and .Values.proxy.enabled (not .Values.proxy.keysSecret) }}
{{- fail "proxy.keysSecret is required with proxy.enabled: a Secret whose key \"keys\" holds the clients' keys, one \"name key\" line each (the proxy serves only clients with a key)" }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.secrets.webhooks) }}
{{- range $s := (dig "ingress" "sources" list $c) }}
{{- if and (not $s.secret_env) (not $s.secret_file) (not $s.tenant_secret_dir) (not $s.tenant_secret_env) (ne ($s.auth | toString) "none") (not $s.optional) }}
{{- fail (printf "secrets.webhooks is required: ingress source %s reads its secret from the key %s of that Secret (or give the source secret_env, secret_file, auth: none or optional: true)" $s.name $s.name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.drainTimeoutSeconds) 10 | int) }}
{{- fail (printf "terminationGracePeriodSeconds %d must exceed drainTimeoutSeconds %d by more than 10s, or the kubelet kills a draining consumer" (int .Values.terminationGracePeriodSeconds) (int .Values.drainTimeoutSeconds)) }}
{{- end }}
{{- end }}

{{/*
The consumer's configuration: .Values.config with what the chart decides
set over it.
*/}}
{{- define "oncegate.config" -}}
{{- $c := deepCopy (.Values.config | default dict) }}
{{- $_ := set $c "data_dir" (include "oncegate.dataDir" .) }}
{{- $nats := deepCopy (get $c "nats" | default dict) }}
{{- if include "oncegate.natsURL" . }}
{{- $_ := set $nats "url" (include "oncegate.natsURL" .) }}
{{- end }}
{{- if .Values.nats.credsSecret }}
{{- $_ := set $nats "creds_file" (printf "%s/nats/nats.creds" (include "oncegate.secretsDir" .)) }}
{{- end }}
{{- $_ := set $c "nats" $nats }}
{{- $ledger := deepCopy (get $c "ledger" | default dict) }}
{{- $_ := set $ledger "store" .Values.ledger.store }}
{{- $_ := set $c "ledger" $ledger }}
{{- $metrics := deepCopy (get $c "metrics" | default dict) }}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- $_ := set $c "metrics" $metrics }}
{{- if .Values.ingress.enabled }}
{{- $in := deepCopy (get $c "ingress" | default dict) }}
{{- $_ := set $in "listen" (printf "0.0.0.0:%d" (int .Values.ingress.port)) }}
{{- $sources := list }}
{{- range $s := (get $in "sources" | default list) }}
{{- $s = deepCopy $s }}
{{- if and (not (get $s "secret_env")) (not (get $s "secret_file")) (ne (get $s "auth" | toString) "none") }}
{{- $_ := set $s "secret_file" (printf "%s/webhooks/%s" (include "oncegate.secretsDir" $) (get $s "name")) }}
{{- end }}
{{- $sources = append $sources $s }}
{{- end }}
{{- if $sources }}
{{- $_ := set $in "sources" $sources }}
{{- end }}
{{- $_ := set $c "ingress" $in }}
{{- end }}
{{- if .Values.console.enabled }}
{{- $con := deepCopy (get $c "console" | default dict) }}
{{- $_ := set $con "listen" (printf "0.0.0.0:%d" (int .Values.console.port)) }}
{{- if .Values.console.tokensSecret }}
{{- $_ := set $con "token_file" (printf "%s/console/tokens" (include "oncegate.secretsDir" .)) }}
{{- end }}
{{- $_ := set $c "console" $con }}
{{- end }}
{{- if .Values.proxy.enabled }}
{{- $px := deepCopy (get $c "proxy" | default dict) }}
{{- $_ := set $px "listen" (printf "0.0.0.0:%d" (int .Values.proxy.port)) }}
{{- $_ := set $px "keys_file" (printf "%s/proxy/keys" (include "oncegate.secretsDir" .)) }}
{{- $_ := set $c "proxy" $px }}
{{- end }}
{{- if .Values.secrets.encryptionKey }}
{{- $enc := deepCopy (get $c "encryption" | default dict) }}
{{- $_ := set $enc "key_file" (printf "%s/encryption/key" (include "oncegate.secretsDir" .)) }}
{{- $_ := set $c "encryption" $enc }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* The pod template of the Deployment or the StatefulSet. */}}
{{- define "oncegate.podTemplate" -}}
metadata:
  labels:
    {{- include "oncegate.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A changed configuration rolls the pods.
    checksum/config: {{ include "oncegate.config" . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "oncegate.serviceAccountName" . }}
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    fsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: consumer
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["run", "-require-nats-url", "-config", "{{ include "oncegate.configDir" . }}/oncegate.yaml"]
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: ["ALL"]
      ports:
        - name: metrics
          containerPort: {{ int .Values.metrics.port }}
          protocol: TCP
        {{- if .Values.ingress.enabled }}
        - name: webhooks
          containerPort: {{ int .Values.ingress.port }}
          protocol: TCP
        {{- end }}
        {{- if .Values.console.enabled }}
        - name: console
          containerPort: {{ int .Values.console.port }}
          protocol: TCP
        {{- end }}
        {{- if .Values.proxy.enabled }}
        - name: proxy
          containerPort: {{ int .Values.proxy.port }}
          protocol: TCP
        {{- end }}
      env:
        {{- if .Values.secrets.llmAPIKey.secret }}
        - name: {{ dig "llm" "api_key_env" "OPENAI_API_KEY" (.Values.config | default dict) }}
          valueFrom:
            secretKeyRef:
              name: {{ .Values.secrets.llmAPIKey.secret }}
              key: {{ .Values.secrets.llmAPIKey.key }}
        {{- end }}
        {{- range $name, $ref := .Values.secretEnv }}
        - name: {{ $name }}
          valueFrom:
            secretKeyRef:
              name: {{ required (printf "secretEnv.%s.secret is required" $name) $ref.secret }}
              key: {{ required (printf "secretEnv.%s.key is required" $name) $ref.key }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: {{ .Values.probes.startup.periodSeconds }}
        failureThreshold: {{ .Values.probes.startup.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
        failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
        failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: config
          mountPath: {{ include "oncegate.configDir" . }}/oncegate.yaml
          subPath: oncegate.yaml
          readOnly: true
        - name: data
          mountPath: {{ include "oncegate.dataDir" . }}
        - name: tmp
          mountPath: /tmp
        {{- if .Values.nats.credsSecret }}
        - name: nats-creds
          mountPath: {{ include "oncegate.secretsDir" . }}/nats
          readOnly: true
        {{- end }}
        {{- if .Values.secrets.webhooks }}
        - name: webhook-secrets
          mountPath: {{ include "oncegate.secretsDir" . }}/webhooks
          readOnly: true
        {{- end }}
        {{- if .Values.secrets.encryptionKey }}
        - name: encryption-key
          mountPath: {{ include "oncegate.secretsDir" . }}/encryption
          readOnly: true
        {{- end }}
        {{- if and .Values.console.enabled .Values.console.tokensSecret }}
        - name: console-tokens
          mountPath: {{ include "oncegate.secretsDir" . }}/console
          readOnly: true
        {{- end }}
        {{- if .Values.proxy.enabled }}
        - name: proxy-keys
          mountPath: {{ include "oncegate.secretsDir" . }}/proxy
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "oncegate.fullname" . }}
    - name: tmp
      emptyDir: {}
    {{- if ne .Values.ledger.store "badger" }}
    # The ledger and the cache are in JetStream KV: the data directory
    # holds nothing that must outlive the pod.
    - name: data
      emptyDir: {}
    {{- end }}
    {{- if .Values.nats.credsSecret }}
    # Secret files are root's, of mode 0440 under the pod's fsGroup: what
    # the consumer's secret-file rule accepts (and nothing looser).
    - name: nats-creds
      secret:
        secretName: {{ .Values.nats.credsSecret }}
        defaultMode: 0440
        items:
          - key: nats.creds
            path: nats.creds
    {{- end }}
    {{- if .Values.secrets.webhooks }}
    - name: webhook-secrets
      secret:
        secretName: {{ .Values.secrets.webhooks }}
        defaultMode: 0440
    {{- end }}
    {{- if .Values.secrets.encryptionKey }}
    - name: encryption-key
      secret:
        secretName: {{ .Values.secrets.encryptionKey }}
        defaultMode: 0440
        items:
          - key: key
            path: key
    {{- end }}
    {{- if and .Values.console.enabled .Values.console.tokensSecret }}
    - name: console-tokens
      secret:
        secretName: {{ .Values.console.tokensSecret }}
        defaultMode: 0440
        items:
          - key: tokens
            path: tokens
    {{- end }}
    {{- if .Values.proxy.enabled }}
    - name: proxy-keys
      secret:
        secretName: {{ .Values.proxy.keysSecret }}
        defaultMode: 0440
        items:
          - key: keys
            path: keys
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
